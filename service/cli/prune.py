"""`ett prune`: drop the raw events and job detail of jobs that ended long ago."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta

from service.store.engine import open_database
from service.store.retention import prune


def _cmd(args: argparse.Namespace) -> int:
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
