"""Passes that resume running jobs from their snapshots (ett_core.resume) store exactly
what a recompute from nothing stores, and fall back to all the events when something new
lands before a snapshot's cut."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import text

from ett_core import Taxonomy
from service.aggregate import Aggregator
from tests.factories import BASE, event, fixed, post_all, results_state, wipe_results

TIMEOUT_S = 600.0
JOB, MODEL = "trainer-1", "model-t"


def _trainer(minutes: float, since: float = 0.0) -> list[dict]:
    """A continuous trainer: a heartbeat with its step every 20 s, a save every 30 min."""
    out = []
    if since == 0:
        out += [event("allocated", 0, job_id=JOB, model=MODEL, gpus=8),
                event("phase_start", 0, job_id=JOB, model=MODEL, phase="pre_train"),
                event("phase_end", 5, job_id=JOB, model=MODEL, phase="pre_train"),
                event("phase_start", 5, job_id=JOB, model=MODEL, phase="training")]
    k = int(since * 3) + 1
    while k / 3 <= minutes:
        m = 5 + k / 3
        out.append(event("heartbeat", m, job_id=JOB, model=MODEL, attrs={"step": k}))
        if k % 90 == 0:
            out += [event("phase_start", m, job_id=JOB, model=MODEL, phase="checkpoint_save"),
                    event("checkpoint", m + 0.5, job_id=JOB, model=MODEL),
                    event("phase_end", m + 0.5, job_id=JOB, model=MODEL,
                          phase="checkpoint_save")]
        k += 1
    return out


def _from_nothing(engine, now) -> dict[str, list]:
    wipe_results(engine)
    Aggregator(engine, Taxonomy.default(), heartbeat_timeout_s=TIMEOUT_S,
               clock=fixed(now)).run_pass(recompute_all=True)
    return results_state(engine)


def test_resumed_passes_store_what_a_recompute_from_nothing_stores(api, db_engine) -> None:
    post_all(api, _trainer(300))
    agg = Aggregator(db_engine, Taxonomy.default(), heartbeat_timeout_s=TIMEOUT_S,
                     clock=fixed(BASE + timedelta(minutes=305.7)))
    agg.run_pass()
    done = 300.0
    # New heartbeats (a save among them), a pass with nothing new, one across an hour.
    for later in (1, 2, 2, 40, 41, 60):
        if later > done - 300:
            post_all(api, _trainer(300 + later, since=done))
            done = 300.0 + later
        agg.clock = fixed(BASE + timedelta(minutes=305.7 + later))
        agg.run_pass()
    stats = agg.cache_stats()
    assert stats["resumed"] >= 5
    # New heartbeats after the scan's last event are all a pass reads (ett_core.tail_scan).
    assert stats["read_after_scan"] >= 4
    now = BASE + timedelta(minutes=365.7)
    assert results_state(db_engine) == _from_nothing(db_engine, now)


def test_an_event_before_the_cut_makes_the_pass_compute_the_job_from_all_events(
        api, db_engine) -> None:
    post_all(api, _trainer(300))
    now = BASE + timedelta(minutes=305.7)
    agg = Aggregator(db_engine, Taxonomy.default(), heartbeat_timeout_s=TIMEOUT_S,
                     clock=fixed(now))
    agg.run_pass()
    post_all(api, _trainer(301, since=300))
    agg.clock = fixed(now := now + timedelta(minutes=1))
    agg.run_pass()
    resumed = agg.cache_stats()["resumed"]
    assert resumed == 1
    # A data stall reported an hour late: before the latest save, so before the cut.
    post_all(api, [event("phase_start", 240, job_id=JOB, model=MODEL, phase="data_stall"),
                   event("phase_end", 250, job_id=JOB, model=MODEL, phase="data_stall")])
    with db_engine.connect() as conn:
        first = conn.execute(text("SELECT min(first_ts) FROM dirty_jobs")).scalar_one()
    assert first == BASE + timedelta(minutes=240)
    agg.clock = fixed(now := now + timedelta(minutes=1))
    agg.run_pass()
    assert agg.cache_stats()["resumed"] == resumed
    with db_engine.connect() as conn:
        stalls = conn.execute(text("SELECT count(*) FROM segments WHERE phase = 'data_stall'"))
        assert stalls.scalar_one() > 0
    assert results_state(db_engine) == _from_nothing(db_engine, now)


def test_an_event_after_the_cut_but_before_the_latest_scanned_one_is_read_from_the_cut(
        api, db_engine) -> None:
    post_all(api, _trainer(300))  # the latest save starts at minute 305: the cut
    now = BASE + timedelta(minutes=305.7)
    agg = Aggregator(db_engine, Taxonomy.default(), heartbeat_timeout_s=TIMEOUT_S,
                     clock=fixed(now))
    agg.run_pass()
    for since in (300, 301):  # heartbeats up to minute 306, then up to 307
        post_all(api, _trainer(since + 1, since=since))
        agg.clock = fixed(now := now + timedelta(minutes=1))
        agg.run_pass()
    stats = agg.cache_stats()
    assert (stats["resumed"], stats["read_after_scan"]) == (2, 1)
    # A data stall reported late, after the cut but before the latest heartbeat: the scan
    # cannot take it, the snapshot from its cut can.
    post_all(api, [event("phase_start", 306.1, job_id=JOB, model=MODEL, phase="data_stall"),
                   event("phase_end", 306.2, job_id=JOB, model=MODEL, phase="data_stall")])
    agg.clock = fixed(now := now + timedelta(minutes=1))
    agg.run_pass()
    stats = agg.cache_stats()
    assert (stats["resumed"], stats["read_after_scan"]) == (3, 1)
    with db_engine.connect() as conn:
        stalls = conn.execute(text("SELECT count(*) FROM segments WHERE phase = 'data_stall'"))
        assert stalls.scalar_one() > 0
    assert results_state(db_engine) == _from_nothing(db_engine, now)
