"""Jobs read back for the console: a model's recent jobs and their Level-1 figures, and
what one job's timeline draws (its segments, failures and durable checkpoints).

Every query here is on an index: jobs by (model, last_at), segments and events by job.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text


def recent_jobs(conn: Connection, model: str, limit: int = 20) -> list[dict[str, Any]]:
    rows = conn.execute(text(
        "SELECT job_id, team, state, first_at, last_at, open, held_gpu_seconds,"
        " effective_gpu_seconds, at_risk_gpu_seconds, nof FROM jobs WHERE model = :m"
        " ORDER BY last_at DESC LIMIT :n"), {"m": model, "n": limit})
    return [dict(row._mapping) for row in rows]


def level1_rows(conn: Connection, model: str, since: datetime) -> list[dict[str, Any]]:
    """Level-1 figures of the model's jobs active since `since` (last news at or after it)."""
    rows = conn.execute(text(
        "SELECT job_id, tts_seconds, nof, ttr_seconds, ttr_causes FROM jobs"
        " WHERE model = :m AND last_at >= :since"), {"m": model, "since": since})
    return [dict(row._mapping) for row in rows]


def job_segments(conn: Connection, job_id: str) -> list[dict[str, Any]]:
    """The job's stored segments (clipped at hour boundaries), in time order per attempt."""
    rows = conn.execute(text(
        "SELECT attempt, start_at, end_at, gpus, component, phase, owner, settled"
        " FROM segments WHERE job_id = :j ORDER BY attempt, start_at, seq"), {"j": job_id})
    return [dict(row._mapping) for row in rows]


def job_marks(conn: Connection, job_id: str) -> list[dict[str, Any]]:
    """The job's failure and checkpoint events (a checkpoint event means durable)."""
    rows = conn.execute(text(
        "SELECT attempt, ts, type, attrs FROM events WHERE job_id = :j"
        " AND type IN ('failure', 'checkpoint') ORDER BY ts"), {"j": job_id})
    return [dict(row._mapping) for row in rows]
