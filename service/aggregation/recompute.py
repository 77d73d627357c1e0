"""`ett aggregate --recompute-all --workers N`: a full recompute in N processes at once.

A full recompute is CPU-bound in Python (decoding events, the core, formatting rows), so
one process leaves the other cores idle. Each worker process runs an ordinary pass over
the jobs of its share of the models (`aggregate.model_share`). The shares are disjoint by
model, and every fleet rollup row is keyed by model, so the workers never wait on each
other's rows; the per-job advisory locks still keep them, and any live aggregator, off
the same job.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from datetime import datetime

from service.aggregate import PassReport
from service.settings import Settings

_progress: mp.Queue | None = None  # type: ignore[type-arg]


def _init(progress: mp.Queue) -> None:  # type: ignore[type-arg]
    global _progress
    _progress = progress


def _work(url: str, settings: Settings, share: tuple[int, int],
          now: datetime | None) -> PassReport:
    from service.aggregate import build_aggregator
    from service.store.engine import make_engine

    engine = make_engine(url, pool_size=2, statement_timeout_ms=0)
    try:
        aggregator = build_aggregator(settings, engine)
        if now is not None:
            aggregator.clock = lambda: now

        def progress(done: int, total: int) -> None:
            if _progress is not None:
                _progress.put((share[0], done, total))

        return aggregator.run_pass(recompute_all=True, progress=progress, share=share)
    finally:
        engine.dispose()


def _count_jobs(url: str) -> int:
    from service.store.engine import make_engine
    from service.store.results import count_jobs

    engine = make_engine(url, pool_size=1, statement_timeout_ms=0)
    try:
        with engine.connect() as conn:
            return count_jobs(conn)
    finally:
        engine.dispose()


def recompute_all(url: str, settings: Settings, workers: int,
                  progress: Callable[[int, int], None] | None = None,
                  now: datetime | None = None) -> PassReport:
    """Recompute every job in `workers` processes; the merged report of their passes.
    `now` fixes the passes' clock (benchmarks and tests), else each reads its own."""
    total = _count_jobs(url) if progress is not None else 0
    ctx = mp.get_context("spawn")  # no forked copies of this process's connections
    updates = ctx.Queue()
    counts: dict[int, int] = {}
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init,
                             initargs=(updates,)) as pool:
        futures: list[Future[PassReport]] = [
            pool.submit(_work, url, settings, (k, workers), now) for k in range(workers)]
        while True:
            finished = all(f.done() for f in futures)
            try:  # once all are done, only what is still queued
                k, done, _share_total = updates.get(timeout=0.05 if finished else 0.2)
            except queue.Empty:
                if finished:
                    break
                continue
            counts[k] = done
            if progress is not None:
                done_all = sum(counts.values())
                progress(done_all, max(total, done_all))
        results = [f.result() for f in futures]
    report = PassReport(started_at=min(r.started_at for r in results))
    report.finished_at = max(r.finished_at or r.started_at for r in results)
    for r in results:
        report.jobs_recomputed += r.jobs_recomputed
        report.jobs_failed += r.jobs_failed
        report.jobs_skipped_locked += r.jobs_skipped_locked
        report.failed_jobs.extend(r.failed_jobs)
    return report
