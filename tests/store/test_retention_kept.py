"""Dropping a month's partition keeps every event of every job `ett prune` keeps, found
without reading the month (`retention.kept_jobs`): a running job, one that ended after
the horizon, one still queued, a quarantined one, one with no attempt, a job moved to its
team's `{job}@{team}` name, and a running job whose only events in the month are old ones
backfilled after it started. Each test checks the candidates against the truth read from
the partition itself before pruning, then that the kept job lost nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

import service.aggregate as aggregate_module
import service.aggregation.chunks as chunks_module
from ett_core.instants import dt_to_us
from service.store import retention
from service.store.retention import ensure_partitions, kept_jobs, partitions, prune
from tests.factories import event, fixed, post_all, spec_example

JANUARY = datetime(2026, 1, 1, tzinfo=UTC)
FEBRUARY = datetime(2026, 2, 1, tzinfo=UTC)
# The prune's now and horizon: cutoff 10 February, so January is wholly before it.
NOW = datetime(2026, 2, 17, tzinfo=UTC)
HORIZON = timedelta(days=7)
CUTOFF = NOW - HORIZON
# A job pruned beside each kept one: it ends on 10 January.
GONE = "gone"


def _stored(engine, job_id: str) -> list[tuple]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(
            "SELECT event_id::text, ts, type, attempt FROM events WHERE job_id = :j"
            " ORDER BY ts, event_id"), {"j": job_id})]


def _in_january(engine) -> set[str]:
    """The truth: the jobs with events in January's partition."""
    with engine.connect() as conn:
        return set(conn.execute(text("SELECT DISTINCT job_id FROM events_p202601")).scalars())


def _prunable(engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.execute(text(
            "SELECT job_id FROM jobs WHERE NOT open AND last_at < :c"), {"c": CUTOFF}).scalars())


def _setup(api, app_context, clock: datetime = NOW) -> None:
    ensure_partitions(app_context.aggregator.engine, JANUARY + timedelta(days=14))
    app_context.aggregator.clock = fixed(clock)
    post_all(api, spec_example(job_id=GONE, base=JANUARY + timedelta(days=9)))


def _prune_keeps(api, db_engine, kept: str) -> list[tuple]:
    """Prune January; assert `kept` was a candidate, kept whole, and its events are still
    duplicates when sent again; return its events."""
    before = _stored(db_engine, kept)
    assert any(r[1] < FEBRUARY for r in before), "the kept job has events in January"
    truth = _in_january(db_engine) - _prunable(db_engine)
    with db_engine.connect() as conn:
        candidates = set(kept_jobs(conn, JANUARY, CUTOFF))
    assert kept in truth and truth <= candidates
    prune(db_engine, HORIZON, NOW)
    with db_engine.connect() as conn:
        assert "events_p202601" not in partitions(conn)
    assert _stored(db_engine, kept) == before
    assert _stored(db_engine, GONE) == []
    return before


def _resend(api, events: list[dict]) -> None:
    again = api.post("/v1/events", json={"events": events}).json()
    assert again == {"accepted": 0, "duplicates": len(events), "rejected": []}


def test_a_running_job_keeps_its_events_of_the_dropped_month(api, app_context,
                                                             db_engine) -> None:
    start = FEBRUARY - timedelta(hours=2)
    running = [event("allocated", 0, job_id="running", base=start, gpus=8, team="ads"),
               event("phase_start", 0, job_id="running", base=start, phase="training"),
               event("heartbeat", 0, job_id="running", base=NOW - timedelta(minutes=5))]
    _setup(api, app_context)
    post_all(api, running)
    app_context.aggregator.run_pass()
    assert api.get("/v1/jobs/running").json()["state"] == "running"
    _prune_keeps(api, db_engine, "running")
    _resend(api, running)


def test_a_job_that_ended_after_the_horizon_keeps_its_first_attempt(api, app_context,
                                                                    db_engine) -> None:
    base = FEBRUARY - timedelta(hours=1)
    late = datetime(2026, 2, 12, tzinfo=UTC)
    job = [event("allocated", 0, job_id="late", base=base, gpus=8, team="ads"),
           event("phase_start", 0, job_id="late", base=base, phase="training"),
           event("failure", 30, job_id="late", base=base, attrs={"cause": "infra"}),
           event("released", 32, job_id="late", base=base, attrs={"reason": "failed"}),
           event("allocated", 0, job_id="late", base=late, attempt=1, gpus=8),
           event("phase_start", 0, job_id="late", base=late, attempt=1, phase="training"),
           event("released", 60, job_id="late", base=late, attempt=1,
                 attrs={"reason": "completed"})]
    _setup(api, app_context)
    post_all(api, job)
    app_context.aggregator.run_pass()
    result = api.get("/v1/jobs/late").json()
    _prune_keeps(api, db_engine, "late")
    app_context.aggregator.run_pass(recompute_all=True)
    assert api.get("/v1/jobs/late").json() == result
    _resend(api, job)


@pytest.mark.parametrize("heartbeats", [0, 40], ids=["statement", "copy"])
def test_a_job_still_queued_keeps_its_events(api, app_context, db_engine,
                                             heartbeats: int) -> None:
    """Posted after the last pass, by the statement path and by the COPY path (a batch of
    32 or more): no result yet, so nothing says it is over."""
    base = JANUARY + timedelta(days=3)
    job = spec_example(job_id="queued", base=base) + [
        event("heartbeat", 21 + i, job_id="queued", base=base) for i in range(heartbeats)]
    _setup(api, app_context)
    app_context.aggregator.run_pass()
    post_all(api, job)
    _prune_keeps(api, db_engine, "queued")
    _resend(api, job)


def test_a_quarantined_job_keeps_its_events(api, app_context, db_engine,
                                            monkeypatch) -> None:
    real = aggregate_module.compute_job

    def fails_for_one(events, **kwargs):
        events = list(events)
        if events and events[0].job_id == "broken":
            raise RuntimeError("engine bug")
        return real(events, **kwargs)

    monkeypatch.setattr(aggregate_module, "compute_job", fails_for_one)
    _setup(api, app_context)
    post_all(api, spec_example(job_id="broken", base=JANUARY + timedelta(days=4)))
    report = app_context.aggregator.run_pass()
    assert report.jobs_failed == 1
    with db_engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM dirty_jobs")).scalar_one() == 0
        assert conn.execute(text("SELECT job_id FROM aggregation_quarantine")
                            ).scalars().all() == ["broken"]
    _prune_keeps(api, db_engine, "broken")


def test_a_job_with_no_attempt_keeps_its_events(api, app_context, db_engine) -> None:
    """Only rank 1 reported: computed, no attempt, so no result row; never pruned."""
    base = JANUARY + timedelta(days=5)
    job = [event("heartbeat", i, job_id="rank1", base=base, rank=1) for i in range(3)]
    _setup(api, app_context)
    post_all(api, job)
    app_context.aggregator.run_pass()
    assert api.get("/v1/jobs/rank1").status_code == 404
    _prune_keeps(api, db_engine, "rank1")


def test_a_job_moved_to_its_teams_name_keeps_its_events(api, app_context, db_engine) -> None:
    """Team feed wrote `slurm-7` first (pruned with its month); team ads's events for that id
    went to `slurm-7@ads`, which ended after the horizon."""
    first = [event("allocated", 0, job_id="slurm-7", model="feed_x", gpus=1, team="feed",
                   base=JANUARY + timedelta(days=2)),
             event("released", 10, job_id="slurm-7", model="feed_x",
                   base=JANUARY + timedelta(days=2))]
    late = datetime(2026, 2, 12, tzinfo=UTC)
    ads = [event("allocated", 0, job_id="slurm-7", model="ads_x", gpus=8, team="ads",
                 base=FEBRUARY - timedelta(hours=1)),
           event("released", 30, job_id="slurm-7", model="ads_x", team="ads",
                 base=FEBRUARY - timedelta(hours=1), attrs={"reason": "failed"}),
           event("allocated", 0, job_id="slurm-7", model="ads_x", team="ads", attempt=1,
                 gpus=8, base=late),
           event("released", 60, job_id="slurm-7", model="ads_x", team="ads", attempt=1,
                 base=late, attrs={"reason": "completed"})]
    _setup(api, app_context)
    post_all(api, first)
    body = api.post("/v1/events", json={"events": ads}).json()
    assert {m["job_id"] for m in body["moved"]} == {"slurm-7@ads"}
    app_context.aggregator.run_pass()
    _prune_keeps(api, db_engine, "slurm-7@ads")
    assert _stored(db_engine, "slurm-7") == []
    assert api.get("/v1/jobs/slurm-7@ads").json()["model"] == "ads_x"


@pytest.mark.parametrize("aggregated", [True, False], ids=["aggregated", "queued"])
def test_a_running_job_whose_only_events_in_the_month_are_backfilled_keeps_them(
        api, app_context, db_engine, aggregated: bool) -> None:
    """It started on 14 February (its first allocation, `jobs.first_at`); an admin then
    backfilled two events stamped in January: the month's only events of a job that
    started after it."""
    start = datetime(2026, 2, 14, tzinfo=UTC)
    job = [event("allocated", 0, job_id="backfilled", base=start, gpus=8, team="ads"),
           event("phase_start", 0, job_id="backfilled", base=start, phase="training"),
           event("heartbeat", 0, job_id="backfilled", base=NOW - timedelta(minutes=5))]
    old = [event("heartbeat", 0, job_id="backfilled", base=JANUARY + timedelta(days=d))
           for d in (20, 21)]
    _setup(api, app_context)
    post_all(api, job)
    app_context.aggregator.run_pass()
    post_all(api, old)
    if aggregated:
        app_context.aggregator.run_pass()
        with db_engine.connect() as conn:
            first_at, is_open = conn.execute(text(
                "SELECT first_at, open FROM jobs WHERE job_id = 'backfilled'")).one()
        assert is_open and first_at >= FEBRUARY  # its result does not say it had any
    stored = _prune_keeps(api, db_engine, "backfilled")
    assert sum(r[1] < FEBRUARY for r in stored) == 2
    _resend(api, job + old)


def test_the_candidates_are_few_and_the_pruned_jobs_bounds_go(api, app_context,
                                                              db_engine) -> None:
    """A month of finished jobs and one running job: only the running one is a candidate,
    and the pruned jobs leave nothing behind in `job_first_ts`."""
    _setup(api, app_context)
    for day in range(2, 28, 3):
        post_all(api, spec_example(job_id=f"done-{day}", base=JANUARY + timedelta(days=day)))
    start = FEBRUARY - timedelta(hours=2)
    post_all(api, [event("allocated", 0, job_id="running", base=start, gpus=8, team="ads"),
                   event("phase_start", 0, job_id="running", base=start, phase="training"),
                   event("heartbeat", 0, job_id="running", base=NOW - timedelta(minutes=5))])
    app_context.aggregator.run_pass()
    with db_engine.connect() as conn:
        assert kept_jobs(conn, JANUARY, CUTOFF) == ["running"]
    _prune_keeps(api, db_engine, "running")
    with db_engine.connect() as conn:
        left = conn.execute(text("SELECT job_id FROM job_first_ts")).scalars().all()
    assert left == ["running"]


def test_a_pass_lowers_a_jobs_bound_only_when_an_earlier_event_comes(api, app_context,
                                                                     db_engine) -> None:
    """The bound is the earliest event (to the second), moved only by an earlier one: a
    running job's passes leave no dead row behind."""
    _setup(api, app_context)
    start = datetime(2026, 2, 14, 10, 0, 30, 250000, tzinfo=UTC)
    post_all(api, [event("allocated", 0, job_id="running", base=start, gpus=8, team="ads"),
                   event("phase_start", 0, job_id="running", base=start, phase="training")])
    app_context.aggregator.run_pass()

    def bound() -> tuple[datetime, int]:
        with db_engine.connect() as conn:
            return conn.execute(text("SELECT first_ts, xmin::text::bigint FROM job_first_ts"
                                     " WHERE job_id = 'running'")).one()

    first, version = bound()
    assert start - timedelta(seconds=1) < first <= start
    post_all(api, [event("heartbeat", 60 * 24 * 2, job_id="running", base=start)])
    app_context.aggregator.run_pass()
    assert bound() == (first, version)
    post_all(api, [event("heartbeat", -60 * 24, job_id="running", base=start)])
    app_context.aggregator.run_pass()
    earlier = bound()[0]  # the queue row's instant, to the second
    assert start - timedelta(days=1, seconds=1) < earlier <= start - timedelta(days=1)


def test_first_instants_of_a_chunk() -> None:
    """A queue row that did not know its instant leaves the job to its loaded events, or,
    not loaded, to the database."""
    t = [datetime(2026, 1, d, tzinfo=UTC) for d in range(1, 5)]
    seqs = [("a", 1, t[2]), ("a", 2, t[1]), ("b", 3, None), ("c", 4, None), ("c", 5, t[0])]
    loaded = {"b": dt_to_us(t[3]), "d": dt_to_us(t[2])}
    assert chunks_module.first_instants(seqs, loaded) == {
        "a": t[1], "b": t[3], "c": None, "d": t[2]}


def test_drop_old_partitions_logs_its_steps(api, app_context, db_engine, caplog) -> None:
    _setup(api, app_context)
    app_context.aggregator.run_pass()
    with caplog.at_level("INFO", logger=retention.__name__):
        prune(db_engine, HORIZON, NOW)
    assert any("dropped partition events_p202601" in r.getMessage() and "kept jobs" in
               r.getMessage() for r in caplog.records)
