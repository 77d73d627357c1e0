"""Quarantined jobs, as `GET /v1/admin/quarantine` lists them (docs/operations.md).

A job whose computation or storage failed in an aggregation pass is written to the
quarantine (`store/state.py`) with its error and the newest queue row it consumed; passes
leave it out until a queue row with a higher seq shows that its events changed, and a pass
that then stores it takes it out again.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from service.store import state


def quarantine_report(engine: Engine, limit: int = 1000) -> dict[str, Any]:
    """How many jobs are held out, and the `limit` that failed last, most recent first."""
    with engine.connect() as conn:
        held = state.quarantined_count(conn)
        rows = state.quarantined(conn, limit)
    return {"count": held,
            "jobs": [{"job_id": job, "error": error, "last_event_seq": seq,
                      "since": since.isoformat(), "last_failed_at": failed.isoformat(),
                      "failures": failures}
                     for job, error, seq, since, failed, failures in rows]}
