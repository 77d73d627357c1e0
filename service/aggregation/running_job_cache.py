"""The events of running jobs, and the rows stored for them, kept between passes.

Every pass recomputes every running job, because its result grows with `now`; most of
them received nothing new, and loading their events again and replacing all their rows
would be most of an incremental pass (docs/performance.md). With the rows this process wrote
last time, a pass rewrites only what changed (`store.results.update_jobs`).

Events are append-only, and every batch that adds to a job queues that job in
`dirty_jobs`, so a job with no queue rows has exactly the events it had when this process
last loaded them, provided nobody else has recomputed it since (another aggregator may have
consumed queue rows this process never saw). That is what `jobs.computed_at` tells: an
entry is used only while the job's stored row still carries the `now` this process wrote.
(Two aggregators would have to write the same job at the same microsecond of their own
clocks to fool it.)
Memory stays bounded by the running jobs (capped at `max_events`), not by history.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection

from ett_core import Event
from service.store import results as store
from service.store.result_rows import JobRows


@dataclass(frozen=True)
class Entry:
    written_at: datetime
    events: list[Event]
    rows: JobRows


class RunningJobCache:
    def __init__(self, max_events: int) -> None:
        self.max_events = max_events
        self._entries: dict[str, Entry] = {}
        self._size = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def reusable(self, conn: Connection, job_ids: Sequence[str]) -> dict[str, Entry]:
        """The entries of those of `job_ids` (none with queue rows) still valid."""
        candidates = [j for j in job_ids if j in self._entries]
        if not candidates:
            return {}
        out = {}
        for job_id, computed_at in store.computed_at(conn, candidates).items():
            entry = self._entries[job_id]
            if computed_at == entry.written_at:
                out[job_id] = entry
        self.hits += len(out)
        self.misses += len(candidates) - len(out)
        return out

    def retain(self, job_ids: Collection[str]) -> None:
        """Forget the jobs a pass no longer covers (closed, or closed by another aggregator
        while this one did not look): their entries would only hold memory."""
        for job_id in [j for j in self._entries if j not in job_ids]:
            self._size -= len(self._entries.pop(job_id).events)

    def remember(self, now: datetime, job_ids: Iterable[str],
                 running: Mapping[str, tuple[list[Event], JobRows]]) -> None:
        """After a commit: the jobs of a chunk, and the events and rows of those running."""
        for job_id in job_ids:
            old = self._entries.pop(job_id, None)
            if old is not None:
                self._size -= len(old.events)
        for job_id, (events, rows) in running.items():
            if self._size + len(events) > self.max_events:
                break
            self._entries[job_id] = Entry(now, events, rows)
            self._size += len(events)
