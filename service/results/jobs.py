"""Jobs read back: one job's result (with its labels), a model's recent jobs and their
Level-1 figures, and what one job's timeline draws (its segments, failures and durable
checkpoints).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Engine

from ett_core.taxonomy import CAUSES
from service.errors import NotFound
from service.store import queries as q
from service.store.impact import job_labels


def job_answer(engine: Engine, job_id: str) -> tuple[dict[str, Any] | None, bool]:
    """`GET /v1/jobs/{job_id}`: the job's result with its labels, or None and whether the
    job has events the aggregator has not computed yet."""
    with engine.connect() as conn:
        result = q.job_result(conn, job_id)
        if result is not None:
            result["labels"] = job_labels(conn, job_id)
        return result, result is None and q.job_has_events(conn, job_id)


def job_result(engine: Engine, job_id: str) -> dict[str, Any] | None:
    """The job's stored result document (docs/model.md section 7), or None."""
    with engine.connect() as conn:
        return q.job_result(conn, job_id)


def job_timeline(engine: Engine, job_id: str
                 ) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """The job's result, its stored segments and its failure and checkpoint marks;
    NotFound says whether the job is unknown or not aggregated yet."""
    with engine.connect() as conn:
        result = q.job_result(conn, job_id)
        if result is None:
            if q.job_has_events(conn, job_id):
                raise NotFound(f"job {job_id!r} has events but no result yet: the aggregator"
                               " has not run since they arrived")
            raise NotFound(f"job {job_id!r} is unknown")
        return result, q.job_segments(conn, job_id), q.job_marks(conn, job_id)


def level1(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Level-1 over the jobs: mean TTS, NoF by cause, mean TTR (sum of TTRs / NoF)."""
    tts = [r["tts_seconds"] for r in rows if r["tts_seconds"] is not None]
    ttrs = [t for r in rows for t in r["ttr_seconds"]]
    by_cause = dict.fromkeys(CAUSES, 0)
    for r in rows:
        for cause in r["ttr_causes"]:
            by_cause[cause] = by_cause.get(cause, 0) + 1
    nof = sum(r["nof"] for r in rows)
    return {"jobs": len(rows), "mean_tts_seconds": sum(tts) / len(tts) if tts else None,
            "nof": nof, "nof_by_cause": by_cause,
            "mean_ttr_seconds": sum(ttrs) / nof if nof and ttrs else None}


def model_jobs(engine: Engine, model: str, since: datetime
               ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The model's 20 most recent jobs, and Level 1 over its jobs active since `since`."""
    with engine.connect() as conn:
        recent = q.recent_jobs(conn, model)
        return recent, level1(q.level1_rows(conn, model, since))
