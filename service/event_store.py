"""SQL for storing events. Never commits: the caller owns the transaction."""

from __future__ import annotations

from collections.abc import Sequence

import orjson
from sqlalchemy import Connection, text

from .wire import WireEvent

# One statement per batch: arrays are bound once and unnested server-side. Rows are sorted
# by event_id so concurrent batches that share ids take their index locks in the same
# order and cannot deadlock.
_INSERT = text(
    """
    INSERT INTO events (event_id, ts, job_id, attempt, model, type, phase, gpus, team, rank,
                        attrs, extra)
    SELECT u.event_id, u.ts, u.job_id, u.attempt, u.model, u.type, u.phase, u.gpus, u.team,
           u.rank, u.attrs::jsonb, u.extra::jsonb
    FROM unnest(CAST(:event_id AS uuid[]), CAST(:ts AS timestamptz[]), CAST(:job_id AS text[]),
                CAST(:attempt AS int[]), CAST(:model AS text[]), CAST(:type AS text[]),
                CAST(:phase AS text[]), CAST(:gpus AS int[]), CAST(:team AS text[]),
                CAST(:rank AS int[]), CAST(:attrs AS text[]), CAST(:extra AS text[]))
         AS u(event_id, ts, job_id, attempt, model, type, phase, gpus, team, rank, attrs, extra)
    ORDER BY u.event_id
    ON CONFLICT (event_id) DO NOTHING
    RETURNING job_id
    """
)

_MARK_DIRTY = text("INSERT INTO dirty_jobs (job_id) SELECT unnest(CAST(:job_ids AS text[]))")


def _json(value: object) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


def insert_events(conn: Connection, events: Sequence[WireEvent]) -> list[str]:
    """Insert events not stored yet; return the job_id of each newly stored event."""
    if not events:
        return []
    params = {
        "event_id": [e.event_id for e in events],
        "ts": [e.ts for e in events],
        "job_id": [e.job_id for e in events],
        "attempt": [e.attempt for e in events],
        "model": [e.model for e in events],
        "type": [e.type for e in events],
        "phase": [e.phase for e in events],
        "gpus": [e.gpus for e in events],
        "team": [e.team for e in events],
        "rank": [e.rank for e in events],
        "attrs": [_json(e.attrs) for e in events],
        "extra": [_json(e.extra) for e in events],
    }
    return [row[0] for row in conn.execute(_INSERT, params)]


def mark_dirty(conn: Connection, job_ids: Sequence[str]) -> None:
    """Queue jobs for the aggregator, in the same transaction as their events."""
    if job_ids:
        conn.execute(_MARK_DIRTY, {"job_ids": sorted(set(job_ids))})
