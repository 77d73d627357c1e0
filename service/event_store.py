"""SQL for storing events. Never commits: the caller owns the transaction."""

from __future__ import annotations

from collections.abc import Sequence

import orjson
from sqlalchemy import Connection

from .wire import WireEvent

# One statement, so one round trip, per batch. The batch travels as one JSON array
# (serialised by orjson, in C) and is unpacked server-side by json_to_recordset: binding one
# array per column instead spent ~40% of the ingest process's CPU in psycopg's pure-Python
# array dumpers (docs/performance.md). Keys left out of an object (None values) are NULL.
# Rows are sorted by event_id so concurrent batches that share ids take their index locks
# in the same order and cannot deadlock. The second INSERT queues the jobs of the newly
# stored events for the aggregator in the same statement, hence the same transaction; the
# count of new events is the answer. Written in psycopg's parameter style: the API's ingest
# pool (`service.ingest_pool`) sends it as it is.
STORE_SQL = """
    WITH ins AS (
        INSERT INTO events (event_id, ts, job_id, attempt, model, type, phase, gpus, team,
                            rank, attrs, extra)
        SELECT u.event_id, u.ts, u.job_id, u.attempt, u.model, u.type, u.phase, u.gpus,
               u.team, u.rank, u.attrs, u.extra
        FROM json_to_recordset(CAST(%(rows)s AS json))
             AS u(event_id uuid, ts timestamptz, job_id text, attempt int, model text,
                  type text, phase text, gpus int, team text, rank int, attrs jsonb,
                  extra jsonb)
        ORDER BY u.event_id
        ON CONFLICT (event_id) DO NOTHING
        RETURNING job_id
    ), dirty AS (
        INSERT INTO dirty_jobs (job_id) SELECT DISTINCT job_id FROM ins ORDER BY 1
    )
    SELECT count(*) FROM ins
"""

_FIELDS = WireEvent.__slots__


def batch_json(events: Sequence[WireEvent]) -> str:
    """The `rows` parameter of STORE_SQL: one JSON array, absent keys for None."""
    return orjson.dumps(
        [{f: v for f in _FIELDS if (v := getattr(e, f)) is not None} for e in events]
    ).decode()


def store_events(conn: Connection, events: Sequence[WireEvent]) -> int:
    """Insert the events not stored yet and mark their jobs dirty; return how many were new."""
    if not events:
        return 0
    return int(conn.exec_driver_sql(STORE_SQL, {"rows": batch_json(events)}).scalar_one())
