"""`ett prune`: drop the raw events and per-job results of jobs that ended long ago.

The fleet rollups (`fleet_hourly`, `settled_totals`) are kept, so windows, dashboards and
counters over the pruned period stay exactly as they were; only per-job detail
(`GET /v1/jobs/{job_id}`, re-aggregation after a taxonomy change) is given up.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta

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


def _cmd(args: argparse.Namespace) -> int:
    from .runtime import open_database

    if args.older_than_days < args.settings.max_event_age_days:
        print(f"ett prune: --older-than-days must be at least ETT_MAX_EVENT_AGE_DAYS "
              f"({args.settings.max_event_age_days:g}): a late event for a pruned job would "
              "otherwise be accepted and double-count its rollups")
        return 2
    with open_database(args.settings, pool_size=1) as db:
        jobs, events = prune(db.engine, timedelta(days=args.older_than_days), datetime.now(UTC))
    print(f"pruned {jobs} jobs and {events} events older than {args.older_than_days:g} days")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("prune", help="drop raw events and job detail past retention")
    p.add_argument("--older-than-days", type=float, required=True,
                   help="jobs that ended longer ago than this (>= ETT_MAX_EVENT_AGE_DAYS)")
    p.set_defaults(func=_cmd)
