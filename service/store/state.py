"""The service's own bookkeeping rows: the exported counters' high-water marks
(`aggregator_state`), the service's session locks (export leadership, a recompute of
everything), and the aggregation quarantine.

Every statement runs in the caller's transaction; none commits.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import Connection, text

# Only the holder of this session lock exports database-derived metrics (metrics/collector).
EXPORT_LEADER_LOCK = 0x45_54_54_58  # "ETTX"
# Held by a recompute of everything while it holds the team rollups' deltas back
# (result_rows.drain_pending, service/aggregation/recompute.py).
RECOMPUTE_LOCK = 0x45_54_54_52  # "ETTR"
# An error can quote a whole statement; what an operator reads needs its first lines only.
MAX_ERROR_CHARS = 2000


# --- session locks, and the export's counter marks ---------------------------------------

def take_session_lock(conn: Connection, key: int, *, wait: bool = False) -> bool:
    """Take the advisory lock `key` for this session (held until released or disconnected);
    without `wait`, only if it is free. Whether it was taken."""
    if wait:
        conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": key})
        return True
    return bool(conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar_one())


def release_session_lock(conn: Connection, key: int) -> None:
    conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})


def read_state(conn: Connection, key: str) -> Any | None:
    """The JSON value stored under `key`, or None."""
    row = conn.execute(text("SELECT value FROM aggregator_state WHERE key = :k"),
                       {"k": key}).first()
    return None if row is None else row[0]


def write_state(conn: Connection, key: str, value: Any) -> None:
    conn.execute(
        text(
            "INSERT INTO aggregator_state (key, value, updated_at) VALUES (:k, :v, now())"
            " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()"
        ),
        {"k": key, "v": orjson.dumps(value).decode()},
    )


# --- the quarantine (docs/operations.md) -------------------------------------------------

def quarantine(conn: Connection, failures: Sequence[tuple[str, str, int]], now: datetime
               ) -> None:
    """Record `(job_id, error, last_seq)` failures; a job already listed keeps `since`."""
    if not failures:
        return
    conn.execute(
        text(
            "INSERT INTO aggregation_quarantine AS q"
            " (job_id, error, last_seq, since, failed_at, failures)"
            " SELECT j, e, s, :now, :now, 1"
            " FROM unnest(CAST(:jobs AS text[]), CAST(:errors AS text[]),"
            "             CAST(:seqs AS bigint[])) AS u(j, e, s) ORDER BY j"
            " ON CONFLICT (job_id) DO UPDATE SET error = EXCLUDED.error,"
            " last_seq = greatest(q.last_seq, EXCLUDED.last_seq),"
            " failed_at = EXCLUDED.failed_at, failures = q.failures + 1"
        ),
        {"jobs": [f[0] for f in failures], "errors": [f[1][:MAX_ERROR_CHARS] for f in failures],
         "seqs": [f[2] for f in failures], "now": now},
    )


def release(conn: Connection, job_ids: Iterable[str]) -> None:
    """Take jobs that were stored successfully out of quarantine."""
    ids = list(job_ids)
    if ids:
        conn.execute(text("DELETE FROM aggregation_quarantine WHERE job_id = ANY(:ids)"),
                     {"ids": ids})


def held_back(conn: Connection) -> set[str]:
    """Quarantined jobs with no queue row newer than their failure: a pass skips them."""
    return {r[0] for r in conn.execute(text(
        "SELECT q.job_id FROM aggregation_quarantine q WHERE NOT EXISTS"
        " (SELECT 1 FROM dirty_jobs d WHERE d.job_id = q.job_id AND d.seq > q.last_seq)"))}


def quarantined_count(conn: Connection) -> int:
    return conn.execute(text("SELECT count(*) FROM aggregation_quarantine")).scalar_one()


QuarantineRow = tuple[str, str, int, datetime, datetime, int]


def quarantined(conn: Connection, limit: int) -> list[QuarantineRow]:
    """(job_id, error, last_seq, since, failed_at, failures), most recent failure first."""
    rows = conn.execute(text(
        "SELECT job_id, error, last_seq, since, failed_at, failures"
        " FROM aggregation_quarantine ORDER BY failed_at DESC, job_id LIMIT :n"), {"n": limit})
    return [tuple(row) for row in rows]  # type: ignore[misc]
