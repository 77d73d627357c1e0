"""A pass over a chunk of long-running jobs holds one job's events at a time: a month of
heartbeats each, 200 jobs to a chunk, would otherwise be every job's events in memory at
once (~14 GB on the first pass after a restart, docs/performance.md)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from datetime import timedelta
from functools import partial

from ett_core import Taxonomy
from service.aggregate import Aggregator
from service.store import results as store
from tests.factories import BASE, event, fixed, post_all, ts

JOBS, HEARTBEATS = 8, 1500  # heartbeats every 20 s: 8h20m of a running job each


def _long_jobs() -> list[dict]:
    out = []
    for k in range(JOBS):
        job = f"long-{k}"
        e = lambda t, m, **kw: event(t, m, job_id=job, model=f"m{k % 3}", **kw)  # noqa: B023,E731
        out += [e("allocated", 0, gpus=8, team="ads"), e("phase_start", 0, phase="training")]
        out += [e("heartbeat", (i + 1) / 3, attrs={"step": 10 * i}) for i in range(HEARTBEATS)]
        for m in range(30, HEARTBEATS // 3, 30):  # a durable checkpoint every 30 minutes
            out += [e("phase_start", m, phase="checkpoint_save"),
                    e("phase_end", m + 0.5, phase="checkpoint_save"),
                    e("checkpoint", m + 0.6, attrs={"snapshot_ts": ts(m), "step": 30 * m})]
    return out


def _peak(run: Callable[[], object]) -> tuple[int, object]:
    """The most memory Python held while `run` ran, and what it returned."""
    tracemalloc.start()
    try:
        out = run()
        return tracemalloc.get_traced_memory()[1], out
    finally:
        tracemalloc.stop()


def test_a_chunk_of_long_running_jobs_holds_one_jobs_events_at_a_time(api, db_engine) -> None:
    post_all(api, _long_jobs())
    now = BASE + timedelta(minutes=HEARTBEATS / 3 + 1)
    jobs = [f"long-{k}" for k in range(JOBS)]

    def load_all() -> dict:
        with db_engine.connect() as conn:
            return store.load_events(conn, jobs)

    whole, _ = _peak(load_all)
    # The first pass of a new process (the jobs queued by their ingest, nothing cached; the
    # running jobs leave with their snapshots), then a recompute of everything.
    for recompute_all in (False, True):
        agg = Aggregator(db_engine, Taxonomy.default(), batch_jobs=JOBS, clock=fixed(now))
        pass_peak, report = _peak(partial(agg.run_pass, recompute_all=recompute_all))
        assert report.jobs_recomputed == JOBS and not report.failed_jobs
        # One job's events (1/8 of the whole) plus what the chunk keeps of each job (its
        # rows, segments, snapshot); every job's events at once would be more than the whole.
        assert pass_peak < whole / 2, (recompute_all, pass_peak, whole)
