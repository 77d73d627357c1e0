"""`ett prune` keeps the fleet rollups and drops old per-job detail."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import text

from service.store.retention import ensure_partitions, partitions, prune, prune_jobs
from tests.factories import NOW, event, fixed, post_all, spec_example


def test_prune_drops_old_jobs_but_windows_stay_the_same(api, app_context, db_engine) -> None:
    app_context.aggregator.clock = fixed()
    post_all(api, spec_example(job_id="old"))
    # Started 25 minutes before NOW and still within the heartbeat timeout: open.
    post_all(api, spec_example(job_id="running", base=NOW - timedelta(minutes=25))[:8])
    app_context.aggregator.run_pass()
    params = {"start": "2026-11-01T00:00:00Z", "end": "2026-11-02T00:00:00Z"}
    before = api.get("/v1/ett", params=params).json()
    jobs, events = prune(db_engine, timedelta(days=7), NOW)
    assert (jobs, events) == (1, 27)
    assert api.get("/v1/ett", params=params).json() == before
    assert api.get("/v1/jobs/old").status_code == 404
    with db_engine.connect() as conn:
        left = conn.execute(text("SELECT DISTINCT job_id FROM events")).scalars().all()
    assert left == ["running"]


def test_prune_in_batches_goes_through_every_old_job_once(api, app_context, db_engine) -> None:
    """Batches of two, each after the last one's ids: all five old jobs go, the running
    one stays."""
    app_context.aggregator.clock = fixed()
    for k in range(5):
        post_all(api, spec_example(job_id=f"old-{k}"))
    post_all(api, spec_example(job_id="running", base=NOW - timedelta(minutes=25))[:8])
    app_context.aggregator.run_pass()
    assert prune_jobs(db_engine, NOW - timedelta(days=7), batch_jobs=2) == (5, 5 * 27)
    with db_engine.connect() as conn:
        assert conn.execute(text("SELECT job_id FROM jobs")).scalars().all() == ["running"]
        left = conn.execute(text("SELECT DISTINCT job_id FROM events")).scalars().all()
    assert left == ["running"]


def _ended_early_and_retried_late(job_id: str, base: datetime) -> list[dict]:
    """Attempt 0 fails at `base`; attempt 1 runs 20 days later."""
    late = base + timedelta(days=20)
    return [event("allocated", 0, job_id=job_id, base=base, gpus=8, team="ads"),
            event("phase_start", 0, job_id=job_id, base=base, phase="training"),
            event("failure", 30, job_id=job_id, base=base, attrs={"cause": "infra"}),
            event("released", 32, job_id=job_id, base=base, attrs={"reason": "failed"}),
            event("allocated", 0, job_id=job_id, base=late, attempt=1, gpus=8),
            event("phase_start", 0, job_id=job_id, base=late, attempt=1, phase="training"),
            event("released", 60, job_id=job_id, base=late, attempt=1,
                  attrs={"reason": "completed"})]


def test_prune_drops_whole_months_before_the_horizon_and_keeps_the_jobs_it_keeps(
        api, app_context, db_engine) -> None:
    """January wholly before the horizon (10 February) is dropped as one partition; the
    kept job's January events move to the default partition; February straddles the
    horizon, so the pruned job's events there are deleted row by row."""
    ensure_partitions(db_engine, datetime(2026, 1, 15, tzinfo=UTC))
    with db_engine.connect() as conn:
        assert {"events_p202601", "events_p202602", "events_p202603"} <= set(partitions(conn))
    app_context.aggregator.clock = fixed()
    january = spec_example(job_id="jan", base=datetime(2026, 1, 10, tzinfo=UTC))
    february = spec_example(job_id="feb", base=datetime(2026, 2, 2, tzinfo=UTC))
    kept = _ended_early_and_retried_late("kept", datetime(2026, 1, 31, 23, tzinfo=UTC))
    post_all(api, january + february + kept)
    app_context.aggregator.run_pass()
    params = {"start": "2026-01-01T00:00:00Z", "end": "2026-03-01T00:00:00Z"}
    window = api.get("/v1/ett", params=params).json()
    kept_job = api.get("/v1/jobs/kept").json()

    jobs, events = prune(db_engine, timedelta(days=7), datetime(2026, 2, 17, tzinfo=UTC))

    assert (jobs, events) == (2, 54)
    with db_engine.connect() as conn:
        assert "events_p202601" not in partitions(conn)
        where = conn.execute(text(
            "SELECT tableoid::regclass::text, count(*) FROM events GROUP BY 1")).all()
    assert sorted(where) == [("events_default", 4), ("events_p202602", 3)]
    assert api.get("/v1/ett", params=params).json() == window
    for gone in ("jan", "feb"):
        assert api.get(f"/v1/jobs/{gone}").status_code == 404
    # The kept job is whole: a recompute from its events gives the same result, and a
    # retry of its events, moved partitions or not, is a duplicate.
    app_context.aggregator.run_pass(recompute_all=True)
    assert api.get("/v1/jobs/kept").json() == kept_job
    again = api.post("/v1/events", json={"events": kept}).json()
    assert again == {"accepted": 0, "duplicates": len(kept), "rejected": []}


def test_a_retry_is_a_duplicate_whatever_the_partition(api, db_engine) -> None:
    """Batches that span the default partition and months, by the COPY path (a batch of
    32 or more) and by the statement (fewer)."""
    ensure_partitions(db_engine, datetime(2026, 1, 15, tzinfo=UTC))
    base = datetime(2025, 12, 20, tzinfo=UTC)  # before any partition: the default one
    batch = [event("heartbeat", i * 24 * 60, job_id=f"spread-{i % 3}", base=base)
             for i in range(60)]
    assert api.post("/v1/events", json={"events": batch}).json()["accepted"] == 60
    with db_engine.connect() as conn:
        parts = set(conn.execute(text("SELECT tableoid::regclass::text FROM events")).scalars())
    assert {"events_default", "events_p202601", "events_p202602"} <= parts
    for retry in (batch, batch[:5], batch[-1:]):
        again = api.post("/v1/events", json={"events": retry}).json()
        assert again == {"accepted": 0, "duplicates": len(retry), "rejected": []}


def test_the_aggregator_creates_the_months_ahead_and_moves_early_arrivals_in(
        app_context, db_engine) -> None:
    """An event whose month has no partition yet waits in the default partition; the
    aggregator's first pass of the day creates this month and the next two, and moves it."""
    now = datetime(2031, 5, 10, tzinfo=UTC)
    with db_engine.begin() as conn:
        conn.execute(text("INSERT INTO events (event_id, ts, job_id, attempt, model, type)"
                          " VALUES (gen_random_uuid(), '2031-05-09T12:00:00Z', 'early', 0,"
                          " 'm', 'heartbeat')"))
        assert conn.execute(text("SELECT tableoid::regclass::text FROM events"
                                 " WHERE job_id = 'early'")).scalar_one() == "events_default"
    app_context.aggregator.clock = fixed(now)
    app_context.aggregator.run_pass()
    with db_engine.connect() as conn:
        assert {"events_p203105", "events_p203106", "events_p203107"} <= set(partitions(conn))
        assert conn.execute(text("SELECT tableoid::regclass::text FROM events"
                                 " WHERE job_id = 'early'")).scalar_one() == "events_p203105"
