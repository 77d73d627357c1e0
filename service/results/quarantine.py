"""Quarantined jobs, as `GET /v1/admin/quarantine` lists them (docs/operations.md).

A job whose computation or storage failed in an aggregation pass is written to the
quarantine (`store/state.py`) with its error and the newest queue row it consumed; passes
leave it out until a queue row with a higher seq shows that its events changed, and a pass
that then stores it takes it out again.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from service.store import state


def count(conn: Connection) -> int:
    return state.quarantined_count(conn)


def listing(conn: Connection, limit: int = 1000) -> list[dict[str, Any]]:
    """The quarantined jobs, most recent failure first (GET /v1/admin/quarantine)."""
    return [{"job_id": job, "error": error, "last_event_seq": seq,
             "since": since.isoformat(), "last_failed_at": failed.isoformat(),
             "failures": failures}
            for job, error, seq, since, failed, failures in state.quarantined(conn, limit)]
