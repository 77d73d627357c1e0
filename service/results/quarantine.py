"""Quarantined jobs: those whose computation or storage failed in an aggregation pass.

A failed job never fails the pass: the other jobs' results are stored. It is written
here with its error and the newest queue row it consumed; passes leave it out until a queue
row with a higher seq shows that its events changed, and a pass that then stores it takes
it out again. Every statement runs in the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

# An error can quote a whole statement; what an operator reads needs its first lines only.
MAX_ERROR_CHARS = 2000


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


def count(conn: Connection) -> int:
    return conn.execute(text("SELECT count(*) FROM aggregation_quarantine")).scalar_one()


def listing(conn: Connection, limit: int = 1000) -> list[dict[str, Any]]:
    """The quarantined jobs, most recent failure first (GET /v1/admin/quarantine)."""
    rows = conn.execute(text(
        "SELECT job_id, error, last_seq, since, failed_at, failures"
        " FROM aggregation_quarantine ORDER BY failed_at DESC, job_id LIMIT :n"), {"n": limit})
    return [{"job_id": job, "error": error, "last_event_seq": seq,
             "since": since.isoformat(), "last_failed_at": failed.isoformat(),
             "failures": failures}
            for job, error, seq, since, failed, failures in rows]
