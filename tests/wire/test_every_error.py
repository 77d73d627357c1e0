"""A rejected event reports every problem it has, not only the first, and a batch whose
every event was rejected is still 202 with each event's errors (retries stay safe)."""

from __future__ import annotations

import pytest

from tests.factories import event


def test_every_problem_of_an_event_is_named(api, db_engine) -> None:
    bad = event("allocated", 1, job_id="bad job", attempt=-1, model="", team="a b",
                attrs={"labels": 1} | {"x": 1}, rank="zero")
    bad.pop("gpus", None)
    bad["ts"] = "yesterday"
    r = api.post("/v1/events", json={"events": [bad]})
    assert r.status_code == 202
    body = r.json()
    assert body["accepted"] == 0 and len(body["rejected"]) == 1
    errors = body["rejected"][0]["error"].split("; ")
    fields = [e.split(":", 1)[0] for e in errors]
    assert fields == ["ts", "job_id", "attempt", "model", "gpus", "team", "rank",
                      "attrs.labels"], errors
    assert errors[0].startswith("ts: 'yesterday' is not an RFC 3339 timestamp")


@pytest.mark.parametrize("change, expected", [
    ({"type": "launch"}, ["type"]),
    ({"type": "phase_start", "event_id": "nope"}, ["event_id", "phase"]),
    ({"type": "failure", "attrs": {"cause": "cosmic"}, "gpus": 0}, ["gpus", "attrs.cause"]),
])
def test_an_all_rejected_batch_is_202_with_each_events_errors(api, db_engine, change,
                                                              expected) -> None:
    good = event("heartbeat", 1)
    bad = {**event("heartbeat", 2), **change}
    r = api.post("/v1/events", json={"events": [bad, {**bad, "job_id": ""}]})
    assert r.status_code == 202
    body = r.json()
    assert (body["accepted"], body["duplicates"]) == (0, 0)
    first, second = (rej["error"].split("; ") for rej in body["rejected"])
    assert [e.split(":", 1)[0] for e in first] == expected
    assert sorted(e.split(":", 1)[0] for e in second) == sorted([*expected, "job_id"])
    # Nothing valid was lost: a good event beside them is stored, once, on a retry too.
    for _ in range(2):
        again = api.post("/v1/events", json={"events": [bad, good]}).json()
        assert [rej["index"] for rej in again["rejected"]] == [0]
    assert again["duplicates"] == 1
