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
A running job the core can resume (ett_core.resume) is kept as its snapshot instead: its
events since the snapshot's cut, and the segments it was computed with. It is then of use
even with queue rows, when all of them start after the cut (service/aggregate.py).
Memory stays bounded by the running jobs (capped at `max_events`: events plus segments
kept), not by history.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection

from ett_core import Event, Segment
from ett_core.resume import JobSnapshot
from service.store import results as store
from service.store.result_rows import JobRows


@dataclass(frozen=True)
class Entry:
    written_at: datetime
    # All the job's events, or only those from its snapshot's cut on (then `snapshot`).
    events: Sequence[Event]
    rows: JobRows
    # Where a resumed computation starts (ett_core.resume), and the segments it resumed
    # from: with them a pass neither loads the job's history nor rewrites its rows.
    snapshot: JobSnapshot | None = None
    segments: tuple[Segment, ...] = ()
    # Its labels (the impact rows'): a resumed job has no new allocation, so no new labels.
    labels: dict[str, str] | None = None

    @property
    def size(self) -> int:
        return len(self.events) + len(self.segments)


class RunningJobCache:
    def __init__(self, max_events: int) -> None:
        self.max_events = max_events
        self._entries: dict[str, Entry] = {}
        self._size = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def peek(self, job_id: str) -> Entry | None:
        return self._entries.get(job_id)

    def reusable(self, conn: Connection, job_ids: Sequence[str]) -> dict[str, Entry]:
        """The entries of those of `job_ids` still valid: for a job with queue rows, only
        a snapshot's is of use (its new events are loaded from its cut on)."""
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
            self._size -= self._entries.pop(job_id).size

    def remember(self, job_ids: Iterable[str], running: Mapping[str, Entry]) -> None:
        """After a commit: the jobs of a chunk, and the entries of those running."""
        for job_id in job_ids:
            old = self._entries.pop(job_id, None)
            if old is not None:
                self._size -= old.size
        for job_id, entry in running.items():
            if self._size + entry.size > self.max_events:
                break
            self._entries[job_id] = entry
            self._size += entry.size
