"""The aggregator: the only code that loads events, calls the core (`ett_core`) and writes results.

A pass finds the jobs that received events since the last pass (the `dirty_jobs` queue)
plus the running jobs whose result depends on `now`, recomputes each one completely, and
replaces its stored results in the same transaction that consumes its queue rows. A pass
killed at any point leaves the previous results intact, and running a pass twice changes
nothing. Several aggregators share the work through per-job advisory locks taken with
`pg_try_advisory_xact_lock`: a job another aggregator holds is skipped, never waited for,
so two aggregators cannot deadlock or double-count (docs/operations.md).

One job whose computation or storage fails never fails the pass: its chunk is stored again
one job at a time, each in its own savepoint, and the job that fails is quarantined
(`service/store/state.py`) until its events change.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import InterfaceError, OperationalError, SQLAlchemyError

from ett_core import JobComputation, Taxonomy, compute_job
from ett_core.impact import job_labels
from ett_core.instants import US_PER_SECOND, dt_to_us
from ett_core.resume import JobSnapshot, computation_of, resume_job, snapshot_job
from service.aggregation.chunks import (
    chunk_events,
    chunked,
    due_events,
    every_job,
    first_instants,
    gc_paused,
)
from service.aggregation.running_job_cache import Entry, RunningJobCache
from service.settings import Settings, default
from service.store import impact, retention, state
from service.store import results as store
from service.store.result_rows import (
    Deltas,
    RowFormatter,
    apply_deltas,
    drain_stopped,
    replace_checkpoint_facts,
)
from service.store.retention import ensure_partitions_quietly
from service.taxonomy import taxonomy_from

log = logging.getLogger(__name__)


@dataclass
class PassReport:
    started_at: datetime
    finished_at: datetime | None = None
    jobs_recomputed: int = 0
    jobs_skipped_locked: int = 0
    jobs_failed: int = 0
    jobs_quarantined: int = 0
    lag_seconds: float = 0.0
    failed_jobs: list[str] = field(default_factory=list)

    @property
    def duration_seconds(self) -> float:
        end = self.finished_at or self.started_at
        return (end - self.started_at).total_seconds()

    def to_wire(self) -> dict[str, object]:
        return {
            "started_at": self.started_at.isoformat(),
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "duration_seconds": self.duration_seconds,
            "jobs_recomputed": self.jobs_recomputed,
            "jobs_skipped_locked": self.jobs_skipped_locked,
            "jobs_failed": self.jobs_failed,
            "jobs_quarantined": self.jobs_quarantined,
            "lag_seconds": self.lag_seconds,
        }


class Aggregator:
    def __init__(
        self,
        engine: Engine,
        taxonomy: Taxonomy,
        *,
        heartbeat_timeout_s: float = default("heartbeat_timeout_s"),
        batch_jobs: int = default("aggregate_batch_jobs"),
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        running_job_cache_events: int = 2_000_000,
        incremental: bool = True,
    ) -> None:
        self.engine = engine
        self.taxonomy = taxonomy
        self.heartbeat_timeout_us = int(heartbeat_timeout_s * US_PER_SECOND)
        self.batch_jobs = batch_jobs
        self.incremental = incremental
        self.resumed = 0  # running jobs computed from their snapshots (ett_core.resume)
        self.read_after_scan = 0  # of them, those read only after their scan's last event
        self.clock = clock
        self._listeners: list[Callable[[PassReport], None]] = []
        self._lock = threading.Lock()  # one pass at a time per process
        self._cache = RunningJobCache(max_events=running_job_cache_events)
        self.last_report: PassReport | None = None
        self.last_success_at: datetime | None = None
        self.passes_failed = 0
        # A new process may run fixed code: its first pass retries the quarantined jobs.
        self._quarantine_retried = False
        self._partitions_checked_on: date | None = None

    def listen(self, listener: Callable[[PassReport], None]) -> None:
        """Call `listener` with the report of every pass that completes, in the order the
        listeners were added (the metrics exporter refreshes its snapshot this way)."""
        self._listeners.append(listener)

    def cache_stats(self) -> dict[str, int]:
        """How often running jobs were served from the cache, and how many it holds."""
        return {"hits": self._cache.hits, "misses": self._cache.misses,
                "jobs": len(self._cache), "resumed": self.resumed,
                "read_after_scan": self.read_after_scan}

    def run_pass(self, *, recompute_all: bool = False,
                 progress: Callable[[int, int], None] | None = None,
                 chunks: Iterable[list[str]] | None = None,
                 hold_teams: bool = False) -> PassReport:
        """One pass. With `recompute_all`, `chunks` (of job ids) replaces "every job":
        the processes of one recompute take their chunks from one list
        (service/aggregation/recompute.py); `hold_teams` holds the team rollups' deltas back
        for the process that holds `RECOMPUTE_LOCK` to add (`result_rows.drain_pending`).
        `progress(done, total)` follows the pass; `total` is 0 when `chunks` are given (their
        size is not known ahead)."""
        if (chunks is not None or hold_teams) and not recompute_all:
            raise ValueError("chunks and hold_teams are for recompute_all passes")
        with self._lock:
            now = self.clock()
            report = PassReport(started_at=now)
            if self._partitions_checked_on != now.date():  # the months ahead exist
                ensure_partitions_quietly(self.engine, now)
                self._partitions_checked_on = now.date()
            with self.engine.begin() as conn:  # committed: it may add held-back deltas
                if not hold_teams and drain_stopped(conn):
                    log.warning("aggregation: added the team rollups' deltas held back by a"
                                " recompute of everything that stopped early")
                queued = store.queued_jobs(conn)
                # A quarantined job waits for new events: recomputed unchanged, it would
                # fail the same way every pass. A new process may run fixed code, so its
                # first pass retries them all once.
                held = state.held_back(conn)
                retry: set[str] = set()
                if not self._quarantine_retried:
                    retry, held = held, set()
                    self._quarantine_retried = True
                jobs = sorted((set(queued) | set(store.running_jobs(conn)) | retry)
                              - (set() if recompute_all else held))
                if not recompute_all:
                    total = len(jobs)
                else:  # counted only for a progress bar
                    total = store.count_jobs(conn) if progress and chunks is None else 0
            if queued and chunks is None:
                report.lag_seconds = max(0.0, (now - min(queued.values())).total_seconds())
            if not recompute_all:
                self._cache.retain(jobs)
                chunks = chunked(jobs, self.batch_jobs)
            elif chunks is None:
                # The queued and running jobs first (what a plain pass takes), then every job.
                chunks = itertools.chain(chunked(jobs, self.batch_jobs),
                                         every_job(self.engine, self.batch_jobs, skip=set(jobs)))
            done = 0
            for chunk in chunks:
                with gc_paused():  # and the chunk's objects freed before it resumes
                    self._run_chunk(chunk, now, report, remember=not recompute_all,
                                    hold_teams=hold_teams)
                done += len(chunk)
                if progress is not None:
                    progress(done, max(total, done) if total else 0)
            with self.engine.connect() as conn:
                report.jobs_quarantined = state.quarantined_count(conn)
            report.finished_at = self.clock()
            self.last_report = report
            self.last_success_at = report.finished_at
            for listener in self._listeners:
                listener(report)
            log.info(
                "aggregation pass: recomputed=%d skipped_locked=%d failed=%d duration=%.3fs",
                report.jobs_recomputed, report.jobs_skipped_locked, report.jobs_failed,
                report.duration_seconds,
            )
            return report

    def _compute(self, job_id: str, events: Sequence, now_us: int
                 ) -> JobComputation | str:
        """The job's computation, or the error that stopped it."""
        try:
            return compute_job(events, taxonomy=self.taxonomy, now_us=now_us,
                               heartbeat_timeout_us=self.heartbeat_timeout_us)
        except Exception as exc:  # one bad job must not stop the fleet's numbers
            log.exception("aggregation: computing job_id=%s failed", job_id)
            return f"engine: {type(exc).__name__}: {exc}"

    def _reusable(self, job_id: str, firsts: dict[str, int | None]) -> bool:
        """Whether the cache may serve the job: it has no new events, or its snapshot's
        cut comes before all of them (the first second of each batch, rounded down)."""
        if job_id not in firsts:
            return True
        entry = self._cache.peek(job_id)
        first = firsts[job_id]
        return (self.incremental and entry is not None and entry.snapshot is not None
                and first is not None and first > entry.snapshot.cut_us)

    def _resume(self, conn: Connection, cached: dict[str, Entry], queued: set[str],
                firsts: dict[str, int | None], now_us: int
                ) -> dict[str, tuple[JobComputation, JobSnapshot, int | None]]:
        """The cached jobs with a snapshot that resume (ett_core.resume): (computation,
        next snapshot, the earliest of their new events not due yet, if any)."""
        if not self.incremental:
            return {}
        snaps = {job: e.snapshot for job, e in cached.items() if e.snapshot is not None}
        # New events all after the latest one a snapshot scanned (by their batches' first
        # second) are read from there; else from its cut, and the known ones left out.
        since = {}
        for job, snap in snaps.items():
            if job in queued:
                first = firsts.get(job)
                after = snap.scan is not None and first is not None and first > snap.scan.at_us
                since[job] = snap.scan.at_us + 1 if after else snap.cut_us  # type: ignore[union-attr]
                self.read_after_scan += after
        loaded = store.load_events_from(conn, since)
        out: dict[str, tuple[JobComputation, JobSnapshot, int | None]] = {}
        for job_id, snap in snaps.items():
            try:
                if job_id not in queued:
                    comp = computation_of(snap, now_us=now_us)
                    if comp is not None:
                        out[job_id] = (comp, snap, None)
                    continue
                stored = loaded.get(job_id, [])
                due = due_events(stored, now_us)
                new = due
                if since[job_id] <= snap.cut_us:
                    known = {(e.event_id, e.ts_us) for e in snap.tail}
                    new = [e for e in due if (e.event_id, e.ts_us) not in known]
                got = resume_job(snap, new, taxonomy=self.taxonomy, now_us=now_us,
                                 heartbeat_timeout_us=self.heartbeat_timeout_us)
                if got is not None:
                    later = None if due is stored else min(
                        e.ts_us for e in stored if e.ts_us > now_us)
                    out[job_id] = (*got, later)
            except Exception:  # the full computation decides (and reports) what is wrong
                log.exception("aggregation: resuming job_id=%s failed", job_id)
        self.resumed += len(out)
        return out

    def _snapshot(self, job_id: str, comp: JobComputation, now_us: int) -> JobSnapshot | None:
        try:
            return snapshot_job(comp, taxonomy=self.taxonomy, now_us=now_us,
                                heartbeat_timeout_us=self.heartbeat_timeout_us)
        except Exception:  # a snapshot is an optimisation: the job is computed every pass
            log.exception("aggregation: snapshot of job_id=%s failed", job_id)
            return None

    def _run_chunk(self, job_ids: list[str], now: datetime, report: PassReport,
                   remember: bool = True, hold_teams: bool = False) -> None:
        now_us = dt_to_us(now)
        with self.engine.begin() as conn:
            store.set_chunk_settings(conn)
            locked = store.try_lock_jobs(conn, job_ids)
            report.jobs_skipped_locked += len(job_ids) - len(locked)
            if not locked:
                return
            seqs = store.queue_rows(conn, locked)
            queued = {job for job, _seq, _first in seqs}
            # Running jobs with nothing new: their events, and the rows stored for them,
            # are what this process holds from its last pass
            # (service/aggregation/running_job_cache.py); a running job with new events
            # resumes from its snapshot when none of them is before the snapshot's cut.
            firsts: dict[str, int | None] = {}
            for job, _seq, first in seqs:
                at = None if first is None else dt_to_us(first)
                if job in firsts:
                    known = firsts[job]
                    at = None if at is None or known is None else min(at, known)
                firsts[job] = at
            cached = self._cache.reusable(conn, [j for j in locked if self._reusable(j, firsts)])
            resumed = self._resume(conn, cached, queued, firsts, now_us)
            events = {job: entry.events for job, entry in cached.items()
                      if entry.snapshot is None and job not in resumed}
            missing = [j for j in locked if j not in events and j not in resumed]
            loaded: dict[str, int] = {}  # job -> its earliest event, of those read whole
            computed: list[tuple[str, JobComputation]] = []
            failed: dict[str, str] = {}
            formatter = RowFormatter(now_us)
            rows = {}
            deferred: dict[str, int] = {}  # job -> its earliest event not due yet
            labels: dict[str, dict[str, str]] = {}
            snapshots: dict[str, JobSnapshot] = {}
            for job_id, stored, read_now in chunk_events(conn, locked, resumed, events,
                                                           missing):
                previous = None
                if stored is None:
                    comp, snap, later = resumed[job_id]
                    entry = cached[job_id]
                    previous = (entry.rows, entry.segments)
                    if later is not None:
                        deferred[job_id] = later
                else:
                    if read_now:
                        loaded[job_id] = stored[0].ts_us
                    # Read whole here: the labels need no second read of its events.
                    labels[job_id] = job_labels(stored)
                    job_events = due_events(stored, now_us)
                    if job_events is not stored:
                        deferred[job_id] = min(e.ts_us for e in stored if e.ts_us > now_us)
                    if not job_events:
                        continue
                    comp = self._compute(job_id, job_events, now_us)
                    snap = None
                    if (self.incremental and not isinstance(comp, str)
                            and comp.result.state == "running"):
                        snap = self._snapshot(job_id, comp, now_us)
                    if not isinstance(comp, str):
                        # What resuming needs is in the snapshot now: the computation
                        # kept for storing must not hold the job's events for the rest
                        # of the chunk.
                        if (remember and snap is None and read_now
                                and comp.result.state == "running"):
                            events[job_id] = stored  # the cache keeps them (no snapshot)
                        comp = replace(comp, parts=None)
                if isinstance(comp, str):
                    failed[job_id] = comp
                elif comp.result.attempts:
                    try:
                        rows[job_id] = formatter.job_rows(
                            job_id, comp, snap.stable_segments if snap else 0, previous)
                    except Exception as exc:  # a value no row can hold
                        log.exception("aggregation: rows failed for job_id=%s", job_id)
                        failed[job_id] = f"rows: {type(exc).__name__}: {exc}"
                        continue
                    computed.append((job_id, comp))
                    if snap is not None:
                        snapshots[job_id] = snap
            labels.update((j, cached[j].labels) for j in resumed if cached[j].labels is not None)
            # A failed job keeps its previous results.
            ok = [j for j in locked if j not in failed]
            comps = dict(computed)
            try:
                with conn.begin_nested():
                    self._write(conn, ok, rows, cached, formatter, comps, labels, hold_teams)
            except (OperationalError, InterfaceError):
                raise  # the database, not a job: the chunk is retried as a whole
            except Exception:
                log.warning("aggregation: storing %d jobs failed; storing them one at a time",
                            len(ok), exc_info=True)
                for job_id in ok:
                    try:
                        with conn.begin_nested():
                            self._write(conn, [job_id], rows, {}, formatter, comps, labels,
                                        hold_teams)
                    except (OperationalError, InterfaceError):
                        raise
                    except Exception as exc:
                        log.exception("aggregation: storing job_id=%s failed", job_id)
                        failed[job_id] = f"store: {type(exc).__name__}: {exc}"
            last_seq: dict[str, int] = {}
            for job, seq, _first in seqs:
                last_seq[job] = max(seq, last_seq.get(job, 0))
            # Its queue rows are consumed too: quarantine, not the queue, brings it back,
            # once a newer queue row (new events) shows up.
            state.quarantine(conn, [(j, e, last_seq.get(j, 0)) for j, e in failed.items()],
                             now)
            state.release(conn, [j for j in locked if j not in failed])
            store.consume_queue_rows(conn, [seq for _job, seq, _first in seqs])
            retention.note_first_ts(conn, first_instants(seqs, loaded))
            store.requeue(conn, deferred)  # read again once their future events are due
            computed = [(j, c) for j, c in computed if j not in failed]
            rows = {j: r for j, r in rows.items() if j not in failed}
        # Committed: what was written at `now` is what the cache may now vouch for.
        # A recompute of everything runs in a one-shot process (`ett aggregate --recompute-all`):
        # keeping its running jobs would only cost memory and collector time. It still
        # forgets what it replaced, so a long-lived aggregator's cache cannot go stale.
        comps = dict(computed)
        self._cache.remember(locked, {
            # The rows without what they were made from: one pass's rows only.
            job: (Entry(now, snapshots[job].tail, replace(r, since=None), snapshots[job],
                        comps[job].segments, labels.get(job))
                  if job in snapshots else Entry(now, events[job], r))
            for job, r in rows.items()
            if remember and r.running and (job in snapshots or job in events)})
        report.jobs_recomputed += len(computed)
        report.jobs_failed += len(failed)
        report.failed_jobs.extend(failed)

    @staticmethod
    def _write(conn: Connection, jobs: list[str], rows: dict, cached: dict,
               formatter: RowFormatter, comps: dict[str, JobComputation],
               labels: dict[str, dict[str, str]], hold_teams: bool = False) -> None:
        """Replace the stored results of `jobs` (a cached running job only in part);
        `labels` holds the labels of the resumed jobs and gets those of all the others;
        `hold_teams`: the team rollups' deltas held back (`apply_deltas`)."""
        partial = cached.keys() & rows.keys()
        updated = [(cached[j].rows, rows[j]) for j in jobs if j in partial]
        replaced = [j for j in jobs if j not in partial]
        deltas = Deltas()
        store.delete_job_rows(conn, replaced, deltas)
        store.insert_jobs(conn, [rows[j] for j in replaced if j in rows], formatter, deltas)
        store.update_jobs(conn, updated, formatter, deltas)
        apply_deltas(conn, deltas, hold_teams=hold_teams)
        replace_checkpoint_facts(conn, replaced, comps, updated)
        labels.update(impact.replace_job_impact(conn, jobs, comps, labels))

    def run_loop(self, interval_s: float, stop: threading.Event) -> None:
        """Run passes every `interval_s` until `stop` is set; errors are logged, not fatal."""
        while not stop.is_set():
            started = time.monotonic()
            try:
                self.run_pass()
            except (OperationalError, SQLAlchemyError) as exc:
                self.passes_failed += 1
                log.warning("aggregation pass failed (database): %s", exc)
            except Exception:
                self.passes_failed += 1
                log.exception("aggregation pass failed")
            stop.wait(max(0.0, interval_s - (time.monotonic() - started)))


def build_aggregator(settings: Settings, engine: Engine,
                     taxonomy: Taxonomy | None = None) -> Aggregator:
    """The aggregator as configured (shared by serve, aggregate, the recompute and tests);
    `taxonomy` when the caller has read it already (one reading per process)."""
    return Aggregator(
        engine,
        taxonomy if taxonomy is not None else taxonomy_from(settings),
        heartbeat_timeout_s=settings.heartbeat_timeout_s,
        batch_jobs=settings.aggregate_batch_jobs,
    )
