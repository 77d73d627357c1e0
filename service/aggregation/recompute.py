"""`ett aggregate --recompute-all [--workers N]`: a recompute of every job, in N processes.

A full recompute is CPU-bound in Python (decoding events, the core, formatting rows), so
one process leaves the other cores idle. This process lists the jobs once and hands them
out a chunk at a time to N worker processes, each running an ordinary pass over the chunks
it takes, so none waits while another has work left. The per-job advisory locks keep them,
and any live aggregator, off the same job.

The workers hold the team rollups' deltas back (`result_rows.apply_deltas`, `hold_teams`):
this process adds them all at the end (`result_rows.drain_pending`), also when a worker
failed, so each team row is written once instead of once per chunk (per model) that
touches it. It holds `RECOMPUTE_LOCK` (`store.state`) meanwhile: a second recompute waits
for it, and live passes leave the held-back deltas alone until it ends (after a crash,
the next pass adds them).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from datetime import datetime

from service.aggregate import PassReport
from service.aggregation.chunks import every_job
from service.settings import Settings
from service.store.result_rows import drain_pending
from service.store.results import count_jobs
from service.store.state import RECOMPUTE_LOCK, release_session_lock, take_session_lock

log = logging.getLogger(__name__)

_progress: mp.Queue | None = None  # type: ignore[type-arg]
_chunks: mp.Queue | None = None  # type: ignore[type-arg]


def _init(progress: mp.Queue, chunks: mp.Queue) -> None:  # type: ignore[type-arg]
    global _progress, _chunks
    _progress, _chunks = progress, chunks


def _taken() -> Iterator[list[str]]:
    """The chunks this worker takes, until the list is done (None)."""
    assert _chunks is not None
    while (chunk := _chunks.get()) is not None:
        yield chunk


def _work(url: str, settings: Settings, now: datetime | None) -> PassReport:
    from service.aggregate import build_aggregator
    from service.store.engine import make_engine

    engine = make_engine(url, pool_size=2, statement_timeout_ms=0)
    try:
        aggregator = build_aggregator(settings, engine)
        if now is not None:
            aggregator.clock = lambda: now

        def progress(done: int, _total: int) -> None:
            if _progress is not None:
                _progress.put((os.getpid(), done))

        return aggregator.run_pass(recompute_all=True, progress=progress, chunks=_taken(),
                                   hold_teams=True)
    finally:
        engine.dispose()


class _Feeder(threading.Thread):
    """Lists every job, a page at a time, into the workers' bounded queue; then one end
    mark per worker. Gives up when told to stop (every worker has ended)."""

    def __init__(self, url: str, size: int, out: mp.Queue, workers: int) -> None:  # type: ignore[type-arg]
        super().__init__(name="recompute-feeder", daemon=True)
        self.url, self.size, self.out, self.workers = url, size, out, workers
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def _put(self, item: list[str] | None) -> bool:
        while not self.stop.is_set():
            try:
                self.out.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def run(self) -> None:
        from service.store.engine import make_engine

        engine = make_engine(self.url, pool_size=1, statement_timeout_ms=0)
        try:
            for chunk in every_job(engine, self.size):
                if not self._put(chunk):
                    return
        except BaseException as exc:  # the workers must still be told to end
            self.error = exc
        finally:
            engine.dispose()
        for _ in range(self.workers):
            if not self._put(None):
                return


def _run_workers(url: str, settings: Settings, workers: int, total: int,
                 progress: Callable[[int, int], None] | None,
                 now: datetime | None) -> PassReport:
    ctx = mp.get_context("spawn")  # no forked copies of this process's connections
    updates, chunks = ctx.Queue(), ctx.Queue(maxsize=2 * workers)
    feeder = _Feeder(url, settings.recompute_batch_jobs, chunks, workers)
    counts: dict[int, int] = {}
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init,
                             initargs=(updates, chunks)) as pool:
        futures: list[Future[PassReport]] = [
            pool.submit(_work, url, settings, now) for _ in range(workers)]
        feeder.start()
        try:
            while True:
                finished = all(f.done() for f in futures)
                try:  # once all are done, only what is still queued
                    pid, done = updates.get(timeout=0.05 if finished else 0.2)
                except queue.Empty:
                    if finished:
                        break
                    continue
                counts[pid] = done
                if progress is not None:
                    done_all = sum(counts.values())
                    progress(done_all, max(total, done_all))
        finally:
            feeder.stop.set()
            feeder.join()
        results = [f.result() for f in futures]
    if feeder.error is not None:
        raise feeder.error
    report = PassReport(started_at=min(r.started_at for r in results))
    report.finished_at = max(r.finished_at or r.started_at for r in results)
    for r in results:
        report.jobs_recomputed += r.jobs_recomputed
        report.jobs_failed += r.jobs_failed
        report.jobs_skipped_locked += r.jobs_skipped_locked
        report.failed_jobs.extend(r.failed_jobs)
    return report


def recompute_all(url: str, settings: Settings, workers: int,
                  progress: Callable[[int, int], None] | None = None,
                  now: datetime | None = None) -> PassReport:
    """Recompute every job in `workers` processes, then add the team rollups' deltas; the
    merged report of the workers' passes. `now` fixes the passes' clock (benchmarks and
    tests), else each reads its own."""
    from service.store.engine import make_engine

    engine = make_engine(url, pool_size=1, statement_timeout_ms=0)
    try:
        with engine.connect() as conn:
            if not take_session_lock(conn, RECOMPUTE_LOCK):
                log.warning("recompute: waiting for another recompute of everything to end")
                take_session_lock(conn, RECOMPUTE_LOCK, wait=True)
            total = count_jobs(conn) if progress is not None else 0
            conn.commit()  # the session lock stays; no snapshot is held meanwhile
            try:
                report = _run_workers(url, settings, workers, total, progress, now)
            finally:  # every chunk that committed, whether or not all did
                with conn.begin():
                    drain_pending(conn)
                release_session_lock(conn, RECOMPUTE_LOCK)
                conn.commit()
        return report
    finally:
        engine.dispose()
