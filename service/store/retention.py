"""Retention (`ett prune`): drop the raw events and per-job results of jobs that ended long ago.

The fleet rollups (`fleet_hourly`, `settled_totals`) are kept, so windows, dashboards and
counters over the pruned period stay exactly as they were; only per-job detail
(`GET /v1/jobs/{job_id}`, re-aggregation after a taxonomy change) is given up.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import Engine, text

BATCH_JOBS = 500


def prune(engine: Engine, older_than: timedelta, now: datetime,
          batch_jobs: int = BATCH_JOBS) -> tuple[int, int]:
    """Delete jobs whose last attempt ended before now - older_than; return (jobs, events)."""
    cutoff = now - older_than
    jobs_deleted = events_deleted = 0
    while True:
        # One short transaction per batch: no long locks on a live database.
        with engine.begin() as conn:
            ids = [r[0] for r in conn.execute(
                text("SELECT job_id FROM jobs WHERE NOT open AND last_at < :cutoff"
                     " ORDER BY job_id LIMIT :n FOR UPDATE SKIP LOCKED"),
                {"cutoff": cutoff, "n": batch_jobs},
            )]
            if not ids:
                return jobs_deleted, events_deleted
            params = {"ids": ids}
            events_deleted += conn.execute(
                text("DELETE FROM events WHERE job_id = ANY(:ids)"), params
            ).rowcount
            for table in ("segments", "rollup_hourly", "attempts", "dirty_jobs", "jobs"):
                conn.execute(text(f"DELETE FROM {table} WHERE job_id = ANY(:ids)"), params)
            jobs_deleted += len(ids)
