"""Labels, annotations, /v1/impact and /v1/whatif on a real PostgreSQL, through the app."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import text

from ett_core import Taxonomy, compute_job
from ett_core.impact import cohort_of, impact, job_impact
from service.access import tokens
from service.store.impact import _labels_by_job, glob_to_like
from service.store.results import load_events
from tests.factories import NOW, event, faster_recovery, labelled, post_all, spec_example

MIN = 60.0
WINDOW = {"baseline_start": "2026-10-31T00:00:00Z", "baseline_end": "2026-11-21T00:00:00Z"}


def running_job(job_id: str) -> list[dict]:
    base = NOW - timedelta(minutes=10)
    return [event("allocated", 0, job_id=job_id, base=base, gpus=8, team="ads"),
            event("phase_start", 1, job_id=job_id, base=base, phase="training"),
            event("heartbeat", 9, job_id=job_id, base=base)]


def test_labels_are_stored_per_job_the_later_attempt_winning_a_key(api, agg) -> None:
    events = spec_example("job-l")
    allocs = [e for e in events if e["type"] == "allocated"]
    allocs[0]["attrs"] = {"labels": {"variant": "baseline", "experiment": "pt2-cache"}}
    allocs[1]["attrs"] = {"labels": {"variant": "optimized"}}
    post_all(api, events)
    api.post("/v1/aggregate")
    job = api.get("/v1/jobs/job-l").json()
    assert job["labels"] == {"experiment": "pt2-cache", "variant": "optimized"}


def test_a_pass_takes_the_labels_of_the_events_it_read_as_the_stored_events_give_them(
        api, agg, db_engine) -> None:
    """A pass reading a job's events whole takes its labels from them (no second read);
    they must be what the stored events give: here the attempts' allocations arrive out of
    order, one without labels, one of them the scheduler's, beside jobs with none."""
    events = spec_example("job-m") + spec_example("job-n") + spec_example("job-o")
    allocs = [e for e in events if e["type"] == "allocated"]
    allocs[0]["attrs"] = {"labels": {"variant": "a", "experiment": "x"}}
    allocs[1]["attrs"] = {"labels": {"variant": "b"}}
    allocs[3]["attrs"] = {"source": "scheduler", "labels": {"queue": "q1"}}
    post_all(api, [*events[::-1], event("allocated", 5, job_id="job-p", gpus=2,
                                        attrs={"labels": {"variant": "c"}})])
    agg.run_pass()
    with db_engine.connect() as conn:
        stored = dict(conn.execute(text("SELECT job_id, labels FROM job_impact")).all())
        read = _labels_by_job(conn, list(stored))
        assert stored == {job: read.get(job, {}) for job in stored}
    assert stored["job-m"] == {"variant": "b", "experiment": "x"}
    assert stored["job-n"] == {"queue": "q1"} and stored["job-o"] == {}
    assert stored["job-p"] == {"variant": "c"}


@pytest.mark.parametrize(("labels", "message"), [
    ({"Variant": "x"}, "attrs.labels: key 'Variant' must match"),
    ({"v": 3}, "attrs.labels.v: must be a string"),
    ({"v": "x" * 129}, "attrs.labels.v: at most 128 characters"),
    ({f"k{i}": "x" for i in range(17)}, "attrs.labels: at most 16 labels, got 17"),
    (["variant"], "attrs.labels: must be a JSON object"),
])
def test_bad_labels_are_rejected_by_name_and_the_rest_of_the_batch_is_kept(api, agg, labels,
                                                                           message) -> None:
    bad = event("allocated", 0, job_id="bad", gpus=1, attrs={"labels": labels})
    good = event("allocated", 0, job_id="good", gpus=1, attrs={"labels": {"variant": "a"}})
    r = api.post("/v1/events", json={"events": [bad, good]})
    assert r.status_code == 202
    body = r.json()
    assert body["accepted"] == 1
    assert body["rejected"][0]["index"] == 0
    assert message in body["rejected"][0]["error"]


def test_impact_of_a_faster_recovery_by_label(api, agg, db_engine) -> None:
    post_all(api, labelled(spec_example("base-1"), variant="baseline"))
    post_all(api, labelled(faster_recovery("opt-1"), variant="optimized"))
    post_all(api, labelled(running_job("opt-run"), variant="optimized"))
    api.post("/v1/aggregate")
    doc = api.get("/v1/impact", params={**WINDOW, "baseline_label": "variant:baseline",
                                        "candidate_label": "variant:optimized"}).json()
    b, c = doc["baseline"], doc["candidate"]
    assert (b["jobs"], c["jobs"], c["running_excluded"]) == (1, 1, 1)
    # 8 GPUs: E_B = 90 * 8 = 720 GPU-min, E_C = 94 * 8 = 752, both held 160 * 8 = 1280
    assert b["effective_gpu_seconds"] == 720 * MIN
    assert c["effective_gpu_seconds"] == 752 * MIN
    assert c["held_gpu_seconds"] == 1280 * MIN
    # ttr compilation: O_B = 5 * 8 = 40 GPU-min, O_C = 1 * 8 = 8:
    # 40 * 752 / 720 - 8 = 33.78 GPU-min = 2026.67 GPU-s
    assert doc["savings"]["by_term_component"]["ttr"]["compilation"] == pytest.approx(
        (40 * 752 / 720 - 8) * MIN)
    # total = E_C * (1/ETT_B - 1/ETT_C) = 752 * (1280/720 - 1280/752) = 56.89 GPU-min
    assert doc["savings"]["total_gpu_seconds"] == pytest.approx((752 * 1280 / 720 - 1280) * MIN)
    assert doc["delta_ett_pp"] == pytest.approx(100 * (94 - 90) / 160)  # +2.5 points
    # mean TTR 44 -> 40 min; mean TTS 20 min on both sides: the ratio's denominator is 0
    assert (b["mean_ttr_seconds"], c["mean_ttr_seconds"]) == (44 * MIN, 40 * MIN)
    assert doc["ttr_to_tts_reduction"] is None
    # The SQL sums equal the core's figures summed in Python for the same jobs.
    comps = {}
    with db_engine.connect() as conn:
        for job in ("base-1", "opt-1", "opt-run"):
            evs = load_events(conn, [job])[job]
            comps[job] = job_impact(compute_job(evs, taxonomy=Taxonomy.default(),
                                                now_us=int(NOW.timestamp() * 1e6),
                                                heartbeat_timeout_us=600_000_000).result)
    expected = impact(cohort_of([comps["base-1"]]), cohort_of([comps["opt-1"], comps["opt-run"]]))
    for key in ("savings", "recovery_share", "startup_credit", "delta_ett_pp"):
        assert doc[key] == expected[key]


def test_an_empty_cohort_and_a_running_only_cohort_give_nulls(api, agg) -> None:
    post_all(api, labelled(running_job("r1"), variant="optimized"))
    api.post("/v1/aggregate")
    doc = api.get("/v1/impact", params={**WINDOW, "baseline_label": "variant:none",
                                        "candidate_label": "variant:optimized"}).json()
    assert doc["baseline"]["jobs"] == 0 and doc["candidate"]["running_excluded"] == 1
    assert doc["delta_ett_pp"] is None and doc["savings"]["total_gpu_seconds"] is None
    assert doc["startup_credit"] == {"direct": None, "cascade": None}


def test_impact_selectors_are_checked_by_name(api, agg) -> None:
    for params, message in (
        ({"baseline_label": "novalue"}, "baseline_label: expected key:value"),
        ({"candidate_label": "Bad:x"}, "candidate_label: key 'Bad'"),
        ({"baseline_start": "yesterday"}, "baseline_start"),
        ({"baseline_start": "2026-11-02T00:00:00Z", "baseline_end": "2026-11-01T00:00:00Z"},
         "baseline_end: must be after baseline_start"),
        ({"around": 1, **WINDOW}, "around: give either"),
    ):
        r = api.get("/v1/impact", params=params)
        assert r.status_code == 422, (params, r.text)
        assert message in r.json()["detail"]
    assert api.get("/v1/impact", params={"around": 99}).status_code == 404


def test_whatif_on_the_worked_example(api, agg) -> None:
    post_all(api, spec_example("w1"))
    api.post("/v1/aggregate")
    params = {"start": "2026-10-31T00:00:00Z", "end": "2026-11-21T00:00:00Z",
              "component": "compilation", "reduction": 0.5}
    doc = api.get("/v1/whatif", params=params).json()
    # compilation: 10 min in TTS, 5 in TTR, on 8 GPUs: direct 0.5 * 80 = 40 GPU-min,
    # cascade 0.5 * 120 = 60; projected = 720 / (1280 - saved)
    assert doc["gpu_seconds_saved"] == {"direct": 40 * MIN, "cascade": 60 * MIN}
    assert doc["projected_ett_ratio"]["direct"] == pytest.approx(720 / 1240)
    assert doc["projected_ett_ratio"]["cascade"] == pytest.approx(720 / 1220)
    assert doc["ett_ratio"] == pytest.approx(0.5625)
    r = api.get("/v1/whatif", params={**params, "component": "effective_training"})
    assert r.status_code == 422 and "component: must be one of" in r.json()["detail"]
    r = api.get("/v1/whatif", params={**params, "reduction": 2})
    assert r.status_code == 422 and "reduction" in r.json()["detail"]


def test_annotations_roles_listing_and_impact_around(api, db_engine, agg) -> None:
    with db_engine.begin() as conn:
        _info, writer = tokens.create_token(conn, "writer", "ads", ["ads_*"])
        _info, reader = tokens.create_token(conn, "reader")
    r = api.post("/v1/annotations", json={"ts": "2026-11-01T01:00:00Z", "title": "pt2 cache",
                                          "tags": ["compile"], "models": ["ads_*"]})
    assert r.status_code == 201
    note = r.json()["id"]
    w = api.post("/v1/annotations", headers={"Authorization": f"Bearer {writer}"},
                 json={"ts": "2026-11-02T00:00:00Z", "title": "async ckpt"})
    assert w.status_code == 201
    denied = api.post("/v1/annotations", headers={"Authorization": f"Bearer {writer}"},
                      json={"title": "x", "team": "search"})
    assert denied.status_code == 403 and "only for team 'ads'" in denied.json()["detail"]
    ro = api.post("/v1/annotations", headers={"Authorization": f"Bearer {reader}"},
                  json={"title": "x"})
    assert ro.status_code == 403
    listed = api.get("/v1/annotations", headers={"Authorization": f"Bearer {reader}"},
                     params={"start": "2026-10-31T00:00:00Z",
                             "end": "2026-11-21T00:00:00Z", "team": "ads"}).json()
    titles = [(a["title"], a["team"]) for a in listed["annotations"]]
    assert titles == [("pt2 cache", None), ("async ckpt", "ads")]
    bad = api.post("/v1/annotations", json={"title": ""})
    assert bad.status_code == 422 and "title" in bad.json()["detail"]
    # Around the first note (01:00 on Nov 1): the worked example started at 00:00 (before),
    # the faster job ten hours later (after).
    post_all(api, spec_example("before"))
    post_all(api, faster_recovery("after", hours_later=10))
    api.post("/v1/aggregate")
    doc = api.get("/v1/impact", params={"around": note, "days": 1}).json()
    assert doc["annotation"]["title"] == "pt2 cache"
    assert (doc["baseline"]["jobs"], doc["candidate"]["jobs"]) == (1, 1)
    assert doc["delta_ett_pp"] == pytest.approx(2.5)
    with db_engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM job_impact")).scalar_one() == 2
    assert glob_to_like("ads_*") == "ads\\_%"


def test_the_sdk_checks_labels_by_the_services_rule() -> None:
    from ett_client import events as sdk

    from service.wire import labels as wire

    assert sdk.LABEL_KEY_RE.pattern == wire.LABEL_KEY_RE.pattern
    assert (sdk.MAX_LABELS, sdk.MAX_LABEL_VALUE) == (wire.MAX_LABELS, wire.MAX_LABEL_VALUE)
