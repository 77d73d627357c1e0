"""SQL for storing events. Never commits: the caller owns the transaction."""

from __future__ import annotations

from collections.abc import Sequence

import orjson
from sqlalchemy import Connection, text

from .wire import WireEvent

# One statement per batch: the batch travels as one JSON array (serialised by orjson, in C)
# and is unpacked server-side by json_to_recordset. Binding one array per column instead
# spent ~40% of the ingest process's CPU in psycopg's pure-Python array dumpers
# (docs/performance.md). Keys left out of an object (None values) are NULL. Rows are sorted
# by event_id so concurrent batches that share ids take their index locks in the same order
# and cannot deadlock.
_INSERT = text(
    """
    INSERT INTO events (event_id, ts, job_id, attempt, model, type, phase, gpus, team, rank,
                        attrs, extra)
    SELECT u.event_id, u.ts, u.job_id, u.attempt, u.model, u.type, u.phase, u.gpus, u.team,
           u.rank, u.attrs, u.extra
    FROM json_to_recordset(CAST(:rows AS json))
         AS u(event_id uuid, ts timestamptz, job_id text, attempt int, model text, type text,
              phase text, gpus int, team text, rank int, attrs jsonb, extra jsonb)
    ORDER BY u.event_id
    ON CONFLICT (event_id) DO NOTHING
    RETURNING job_id
    """
)

_MARK_DIRTY = text("INSERT INTO dirty_jobs (job_id) SELECT unnest(CAST(:job_ids AS text[]))")


_FIELDS = WireEvent.__slots__


def insert_events(conn: Connection, events: Sequence[WireEvent]) -> list[str]:
    """Insert events not stored yet; return the job_id of each newly stored event."""
    if not events:
        return []
    rows = [
        {f: v for f in _FIELDS if (v := getattr(e, f)) is not None} for e in events
    ]
    params = {"rows": orjson.dumps(rows).decode()}
    return [row[0] for row in conn.execute(_INSERT, params)]


def mark_dirty(conn: Connection, job_ids: Sequence[str]) -> None:
    """Queue jobs for the aggregator, in the same transaction as their events."""
    if job_ids:
        conn.execute(_MARK_DIRTY, {"job_ids": sorted(set(job_ids))})
