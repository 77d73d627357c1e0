"""POST /v1/events against the real app and a real PostgreSQL."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import orjson
import pytest
from sqlalchemy import text

from tests.factories import event


def stored(engine, column: str = "event_id") -> list:
    with engine.connect() as conn:
        return [r[0] for r in conn.execute(text(f"SELECT {column} FROM events ORDER BY ts"))]


def test_a_valid_batch_is_accepted_and_stored_whole(api, db_engine) -> None:
    batch = [
        event("allocated", 0, gpus=8, team="ads"),
        event("phase_start", 1, phase="training", attrs={"custom": {"x": 1}}),
        event("heartbeat", 2, attrs={"step": 10}, future_field="kept"),
    ]
    r = api.post("/v1/events", json={"events": batch})
    assert r.status_code == 202, r.text
    assert r.json() == {"accepted": 3, "duplicates": 0, "rejected": []}
    with db_engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT event_id::text, type, gpus, team, phase, attrs, extra"
                " FROM events ORDER BY ts"
            )
        ).all()
    assert [r.event_id for r in rows] == [e["event_id"] for e in batch]
    assert rows[0].gpus == 8 and rows[0].team == "ads"
    assert rows[1].attrs == {"custom": {"x": 1}}
    assert rows[2].extra == {"future_field": "kept"}


def test_a_large_batch_is_stored_the_same_and_a_bad_event_in_it_rejected_alone(
        api, db_engine) -> None:
    # Large enough for the whole-batch path (service.wire.whole); one bad event sends the
    # second batch to the per-event path, which rejects it alone by index.
    batch = [event("phase_start", i / 60, phase="training", team="ads", rank=0,
                   attrs={"background": False}) for i in range(200)]
    r = api.post("/v1/events", json={"events": batch})
    assert r.json() == {"accepted": 200, "duplicates": 0, "rejected": []}
    assert api.post("/v1/events", json={"events": batch}).json()["duplicates"] == 200
    more = [event("heartbeat", 10 + i / 60, attrs={"step": i}) for i in range(200)]
    more[7]["gpus"] = 2**20 + 1
    r = api.post("/v1/events", json={"events": more})
    assert r.json() == {"accepted": 199, "duplicates": 0, "rejected": [
        {"index": 7, "error": "gpus: must be <= 1048576, got 1048577"}]}
    with db_engine.connect() as conn:
        rows = conn.execute(text("SELECT phase, team, rank, attrs FROM events"
                                 " WHERE type = 'phase_start' ORDER BY ts LIMIT 1")).one()
    assert tuple(rows) == ("training", "ads", 0, {"background": False})
    assert len(stored(db_engine)) == 399


def test_a_retried_batch_stores_nothing_twice(api, db_engine) -> None:
    batch = [event("allocated", 0, gpus=8), event("heartbeat", 1)]
    assert api.post("/v1/events", json={"events": batch}).json()["accepted"] == 2
    again = api.post("/v1/events", json={"events": batch}).json()
    assert again == {"accepted": 0, "duplicates": 2, "rejected": []}
    assert len(stored(db_engine)) == 2


def test_the_same_event_twice_in_one_batch_counts_as_a_duplicate(api, db_engine) -> None:
    ev = event("heartbeat", 1)
    r = api.post("/v1/events", json={"events": [ev, dict(ev)]}).json()
    assert r == {"accepted": 1, "duplicates": 1, "rejected": []}


def test_valid_events_are_stored_when_others_in_the_batch_are_rejected(api, db_engine) -> None:
    good = event("heartbeat", 1)
    bad = event("allocated", 0)  # no gpus
    r = api.post("/v1/events", json={"events": [bad, good]}).json()
    assert r["accepted"] == 1
    assert r["rejected"] == [{"index": 0, "error": "gpus: is required for allocated"}]
    assert stored(db_engine, "event_id::text") == [good["event_id"]]


def _future(minutes: float) -> str:
    return (datetime.now(UTC) + timedelta(minutes=minutes)).isoformat()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"event_id": "not-a-uuid"}, "event_id: 'not-a-uuid' is not a UUID"),
        ({"event_id": 7}, "event_id: must be a UUID string"),
        ({"ts": "yesterday"}, "ts: 'yesterday' is not an RFC 3339 timestamp"),
        ({"ts": "2026-11-01T10:00:00"}, "ts: timestamp needs a UTC offset"),
        ({"ts": "10 minutes from now"}, "s ahead of the server clock (limit 300 s)"),
        ({"ts": "2001-01-01T00:00:00Z"}, "ts: 2001-01-01T00:00:00Z is older than the retention"),
        ({"job_id": ""}, "job_id: must be 1-200 characters"),
        ({"job_id": "a b"}, "job_id: must be 1-200 characters"),
        ({"job_id": "x" * 201}, "job_id: must be 1-200 characters"),
        ({"model": None}, "model: must be a string"),
        ({"attempt": -1}, "attempt: must be >= 0, got -1"),
        ({"attempt": True}, "attempt: must be an integer"),
        ({"attempt": "1"}, "attempt: must be an integer"),
        ({"type": "started"}, "type: must be one of"),
        ({"type": ["heartbeat"]}, "type: must be one of"),
        ({"type": "phase_start"}, "phase: is required for phase_start"),
        ({"type": "allocated", "gpus": 0}, "gpus: must be >= 1, got 0"),
        ({"type": "allocated", "gpus": 2**31 - 1}, "gpus: must be <= 1048576, got 2147483647"),
        ({"attempt": 2**31}, "attempt: must be <= 1000000"),
        ({"type": "phase_start", "phase": "lost_progress"},
         "phase: 'lost_progress' is reserved for what the engine derives"),
        ({"ts": "2026-W44-7T10:00:00Z"}, "is not an RFC 3339 timestamp"),
        ({"ts": "20261101T100000Z"}, "is not an RFC 3339 timestamp"),
        ({"ts": "2026-11-01T10Z"}, "is not an RFC 3339 timestamp"),
        ({"ts": "2026-11-01T10:00:00+0100"}, "is not an RFC 3339 timestamp"),
        ({"rank": -2}, "rank: must be >= 0"),
        ({"team": "a team"}, "team: must be 1-200 characters"),
        ({"attrs": [1]}, "attrs: must be a JSON object"),
        ({"attrs": {"blob": "x" * 9000}}, "attrs: larger than 8192 bytes"),
        ({"type": "failure", "attrs": {"cause": "gremlins"}}, "attrs.cause: must be one of"),
        ({"type": "released", "attrs": {"reason": "bored"}}, "attrs.reason: must be one of"),
        ({"type": "checkpoint", "attrs": {"snapshot_ts": "soon"}}, "attrs.snapshot_ts:"),
        ({"type": "checkpoint", "attrs": {"step": -1}}, "attrs.step: must be a non-negative"),
        ({"type": "checkpoint", "attrs": {"step": 2**53 + 1}},
         "attrs.step: must be a non-negative integer at most"),
        (
            {"type": "phase_start", "phase": "x", "attrs": {"background": "yes"}},
            "attrs.background: must be true or false",
        ),
    ],
)
def test_each_invalid_field_is_rejected_with_a_message_naming_it(api, change, message) -> None:
    ev = event("heartbeat", 1)
    ev.update(change)
    if ev["ts"] == "10 minutes from now":  # resolved now, not when the suite was collected
        ev["ts"] = _future(10)
    r = api.post("/v1/events", json={"events": [ev]})
    assert r.status_code == 202
    body = r.json()
    assert body["accepted"] == 0
    assert body["rejected"][0]["index"] == 0
    assert message in body["rejected"][0]["error"]


def test_a_missing_required_field_is_named(api) -> None:
    ev = event("heartbeat", 1)
    del ev["job_id"]
    body = api.post("/v1/events", json={"events": [ev, "nope"]}).json()
    assert body["rejected"] == [
        {"index": 0, "error": "job_id: is required"},
        {"index": 1, "error": "event: must be a JSON object"},
    ]


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"{not json", 400, "body is not valid JSON"),
        (b"", 400, "body is empty"),
        (b"[]", 400, "body must be a JSON object"),
        (b"{}", 422, "events: is required"),
        (b'{"events": {}}', 422, "events: must be an array"),
        (b'{"events": []}', 422, "events: must hold at least 1 event"),
    ],
)
def test_a_body_that_is_not_a_batch_is_refused_whole(api, db_engine, body, status, message) -> None:
    r = api.post("/v1/events", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == status
    assert message in r.json()["detail"]
    assert stored(db_engine) == []


def test_more_than_5000_events_is_413_and_nothing_is_written(api, db_engine) -> None:
    batch = [event("heartbeat", 1) for _ in range(5001)]
    r = api.post("/v1/events", json={"events": batch})
    assert r.status_code == 413
    assert "5001 events exceed the limit of 5000" in r.json()["detail"]
    assert stored(db_engine) == []


def test_a_body_over_5_mib_is_413(api) -> None:
    body = b'{"events": ["' + b"x" * (5 * 1024 * 1024) + b'"]}'
    r = api.post("/v1/events", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    assert "exceeds the limit of 5242880 bytes" in r.json()["detail"]


@pytest.mark.slow
def test_a_chunked_body_over_the_limit_is_refused_while_reading(service) -> None:
    sent = 0

    def chunks():
        nonlocal sent
        yield b'{"events": ["'
        for _ in range(64):  # 8 MiB in 128 KiB pieces, no Content-Length
            sent += 1
            yield b"x" * (128 * 1024)
        yield b'"]}'

    r = httpx.post(
        service.url + "/v1/events",
        content=chunks(),
        headers={**service.headers(), "Content-Type": "application/json"},
        timeout=30,
    )
    assert r.status_code == 413
    assert "exceeds the limit" in r.json()["detail"]
    # The server answered before the whole body was read and dropped the connection.
    assert "transfer-encoding" not in r.request.headers or sent <= 64


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (None, "missing Authorization header"),
        ("Basic abc", "must be 'Bearer <token>'"),
        ("Bearer wrong", "invalid or revoked token"),
    ],
)
def test_posts_without_a_valid_token_are_401(api, db_engine, header, message) -> None:
    headers = {} if header is None else {"Authorization": header}
    api.headers.pop("Authorization")
    r = api.post("/v1/events", json={"events": [event("heartbeat", 1)]}, headers=headers)
    assert r.status_code == 401
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert message in r.json()["detail"]
    assert stored(db_engine) == []


def test_probes_need_no_token(api) -> None:
    api.headers.pop("Authorization")
    assert api.get("/healthz").json() == {"status": "ok"}
    ready = api.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    assert api.get("/metrics").status_code == 200


def test_events_mark_their_jobs_dirty_for_the_aggregator(api, db_engine) -> None:
    batch = [
        event("heartbeat", 1, job_id="a"),
        event("heartbeat", 2, job_id="b"),
        event("heartbeat", 3, job_id="a"),
    ]
    api.post("/v1/events", json={"events": batch})
    api.post("/v1/events", json={"events": batch})  # duplicates mark nothing
    with db_engine.connect() as conn:
        jobs = [r[0] for r in conn.execute(text("SELECT job_id FROM dirty_jobs ORDER BY seq"))]
    assert jobs == ["a", "b"]


def test_ingest_outcomes_are_counted_in_metrics(api) -> None:
    api.post("/v1/events", json={"events": [event("heartbeat", 1), {"bad": 1}]})
    text_ = api.get("/metrics").text
    assert 'ett_events_ingested_total{outcome="accepted"} 1.0' in text_
    assert 'ett_events_ingested_total{outcome="rejected"} 1.0' in text_
    assert 'ett_http_request_duration_seconds_count{method="POST",route="/v1/events"' in text_


@pytest.mark.slow
def test_overlapping_batches_posted_at_once_store_every_event_once(service) -> None:
    import psycopg

    from service.store.engine import normalize_url

    pool = [event("heartbeat", i / 10, job_id=f"ovl-{i % 7}") for i in range(3000)]
    barrier = threading.Barrier(4)
    results: list[dict] = []

    def post(offset: int) -> None:
        # Each client sends a shuffled, overlapping slice so ids collide mid-transaction.
        mine = pool[offset : offset + 2000]
        mine = mine[::-1] if offset % 2 else mine
        barrier.wait()
        for i in range(0, len(mine), 500):
            r = httpx.post(
                service.url + "/v1/events",
                headers=service.headers(),
                content=orjson.dumps({"events": mine[i : i + 500]}),
                timeout=60,
            )
            assert r.status_code == 202, r.text
            results.append(r.json())

    threads = [threading.Thread(target=post, args=(o,)) for o in (0, 500, 1000, 0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    accepted = sum(r["accepted"] for r in results)
    duplicates = sum(r["duplicates"] for r in results)
    assert accepted == 3000
    assert accepted + duplicates == 8000
    url = normalize_url(service.database_url).replace("postgresql+psycopg", "postgresql")
    with psycopg.connect(url) as conn:
        ids = {
            str(r[0]) for r in conn.execute("SELECT event_id FROM events WHERE job_id LIKE 'ovl-%'")
        }
    assert ids == {e["event_id"] for e in pool}


def test_event_ids_are_normalised_so_case_variants_are_duplicates(api) -> None:
    ev = event("heartbeat", 1)
    upper = dict(ev, event_id=ev["event_id"].upper())
    r = api.post("/v1/events", json={"events": [ev]}).json()
    r2 = api.post("/v1/events", json={"events": [upper]}).json()
    assert (r["accepted"], r2["duplicates"]) == (1, 1)


def test_uuid_helper_is_random() -> None:
    assert uuid.UUID(event("heartbeat", 0)["event_id"]).version == 4


def _one_job_at_few_instants(n: int) -> list[dict]:
    # Many events of one job at one instant (ranks' heartbeats, a burst): what made the
    # per-row duplicate lookup of the fallback statement quadratic.
    return [event("heartbeat", i // 1000, gpus=8, rank=i % 1000, attrs={"step": i // 1000})
            for i in range(n)]


def test_a_retried_batch_of_the_largest_size_is_all_duplicates(api, db_engine) -> None:
    from service.settings import Settings

    n = Settings(database_url="postgresql://unused").max_batch_events
    batch = _one_job_at_few_instants(n)
    first = api.post("/v1/events", json={"events": batch})
    assert first.json() == {"accepted": n, "duplicates": 0, "rejected": []}
    again = api.post("/v1/events", json={"events": batch})
    assert again.status_code == 202, again.text
    assert again.json() == {"accepted": 0, "duplicates": n, "rejected": []}
    assert len(stored(db_engine)) == n


def test_a_batch_half_stored_half_new_counts_each_half(api, db_engine) -> None:
    batch = _one_job_at_few_instants(4000)
    assert api.post("/v1/events", json={"events": batch[:2000]}).json()["accepted"] == 2000
    # Stored ids and instants with other content are other events, stored under an id
    # derived from their content; a copy of a new event within the batch is a duplicate.
    changed = [dict(ev, attrs={"step": -1}) for ev in batch[:500]]
    mixed = batch[500:2000] + batch[2000:] + changed + batch[3990:]
    r = api.post("/v1/events", json={"events": mixed}).json()
    assert r == {"accepted": 2500, "duplicates": 1510, "rejected": []}
    ids = stored(db_engine)
    assert len(ids) == len(set(ids)) == 4500
    sent = {ev["event_id"] for ev in batch}
    derived = [i for i in ids if str(i) not in sent]
    assert len(derived) == 500
    # The other events' own retry is a duplicate in turn.
    again = api.post("/v1/events", json={"events": mixed}).json()
    assert again == {"accepted": 0, "duplicates": len(mixed), "rejected": []}


@pytest.mark.parametrize("filler", [0, 40])  # the statement alone; COPY, then its fallback
def test_one_id_at_one_instant_with_two_contents_in_one_batch_is_two_events(
        api, db_engine, filler: int) -> None:
    first = event("heartbeat", 5, attrs={"step": 1})
    other = dict(first, attrs={"step": 2})
    batch = [first, other, dict(first)] + [event("heartbeat", 6 + i) for i in range(filler)]
    r = api.post("/v1/events", json={"events": batch}).json()
    assert r == {"accepted": 2 + filler, "duplicates": 1, "rejected": []}
    ids = stored(db_engine)
    assert len(ids) == len(set(ids)) == 2 + filler
    assert uuid.UUID(first["event_id"]) in ids  # the first in the batch keeps its id
    again = api.post("/v1/events", json={"events": batch}).json()
    assert again == {"accepted": 0, "duplicates": len(batch), "rejected": []}
    # Sent alone afterwards, either content is a retry too.
    assert api.post("/v1/events", json={"events": [other]}).json()["duplicates"] == 1
