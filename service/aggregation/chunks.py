"""What one chunk of jobs is made of: the jobs cut into chunks (every job's, for a recompute
of everything), each job's events (read one job at a time), the events due by now, what
the chunk learns of each job's first event; and the collector held off while a chunk is
computed."""

from __future__ import annotations

import gc
from collections.abc import Iterator, Mapping, Sequence, Set
from contextlib import contextmanager
from datetime import datetime

from sqlalchemy import Connection, Engine

from ett_core import Event
from ett_core.instants import us_to_dt
from service.store import results as store


@contextmanager
def gc_paused() -> Iterator[None]:
    """Hold off the cyclic garbage collector while one chunk of jobs is recomputed.

    A chunk allocates hundreds of thousands of small acyclic objects (events, segments,
    row text), all freed by reference counting; the collector's passes over them cost a
    tenth of a full recompute (docs/performance.md). It resumes between chunks, once a
    chunk's objects are freed (else its first pass would walk them all), so any cyclic
    garbage waits at most one chunk.
    """
    if not gc.isenabled():  # someone else paused it: theirs to resume
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def chunked(jobs: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(jobs), size):
        yield jobs[start:start + size]


def every_job(engine: Engine, size: int, skip: Set[str] = frozenset()
              ) -> Iterator[list[str]]:
    """Every job but those in `skip`, in chunks of `size`, read a page at a time: memory
    stays flat however long the history."""
    after, pending = "", []
    while True:
        with engine.connect() as conn:
            page = store.job_ids_after(conn, after, 5 * size)
        if not page:
            break
        after = page[-1]
        for job in page:
            if job in skip:
                continue
            pending.append(job)
            if len(pending) == size:
                yield pending
                pending = []
    if pending:
        yield pending


def due_events(events: Sequence[Event], now_us: int) -> Sequence[Event]:
    """The events that have happened by `now_us` (`events` itself when all have).

    Ingest allows a small clock skew ahead of the server; an event stamped in the future
    (a `released` 290 s ahead) would otherwise count those seconds as held time now. It is
    read once the clock reaches it: the job is queued again until then.
    """
    if all(e.ts_us <= now_us for e in events):
        return events
    return [e for e in events if e.ts_us <= now_us]


def first_instants(seqs: Sequence[tuple[str, int, datetime | None]],
                   loaded: Mapping[str, int]) -> dict[str, datetime | None]:
    """What a chunk knows of each job's earliest event (`retention.note_first_ts`): its
    consumed queue rows' instants and the earliest of the events it read whole (`loaded`:
    job -> epoch microseconds). None for a job with a queue row that did not know its
    instant and events not read: only its stored events can say."""
    known: dict[str, list[datetime]] = {}
    unknown = set()
    for job, _seq, first in seqs:
        if first is None:
            unknown.add(job)
        else:
            known.setdefault(job, []).append(first)
    for job, first_us in loaded.items():
        known.setdefault(job, []).append(us_to_dt(first_us))
    out: dict[str, datetime | None] = {job: None for job in unknown if job not in loaded}
    out.update((job, min(instants)) for job, instants in known.items() if job not in out)
    return out


def chunk_events(conn: Connection, locked: list[str], resumed: Mapping[str, object],
                 events: Mapping[str, Sequence[Event]], missing: list[str]
                 ) -> Iterator[tuple[str, Sequence[Event] | None, bool]]:
    """Each job of a chunk with its events (None for a resumed job) and whether they were
    read from the database just now: the cached ones first, then the others one job at a
    time (`store.stream_events`), so a chunk of long-running jobs holds one job's events
    at a time, not all of them."""
    for job_id in locked:
        if job_id in resumed:
            yield job_id, None, False
        elif job_id in events:
            yield job_id, events[job_id], False
    if missing:
        for job_id, stored in store.stream_events(conn, missing):
            yield job_id, stored, True
