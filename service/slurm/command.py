"""`ett slurm prolog|epilog|sync`: the commands, registered with the `ett` parser and also
run on their own (`service.cli.main` hands `ett slurm ...` here before importing the rest
of the program, so a hook costs one interpreter start and the standard library)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from . import sacct
from .hooks import run_hook
from .poster import ConfigError, Target, deliver, flush, target_from_env
from .runs import events_of

BATCH = 1000


def _log(kind: str):
    def log(message: str) -> None:
        # One line per message: slurmctld's log interleaves many jobs' hooks.
        flat = " / ".join(part.strip() for part in message.splitlines() if part.strip())
        print(f"ett slurm {kind}: {flat}", file=sys.stderr, flush=True)
    return log


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "slurm", help="the Slurm adapter: controller hooks and the sacct reconciler",
        description="Post Slurm's allocations and releases as scheduler events (docs/slurm.md)."
                    " Reads ETT_URL and ETT_TOKEN (or ETT_TOKEN_FILE), an adapter token.")
    kinds = parser.add_subparsers(dest="slurm_command", required=True)
    for kind, text in (("prolog", "PrologSlurmctld: post the run's allocation"),
                       ("epilog", "EpilogSlurmctld: post the run's release and state")):
        hook = kinds.add_parser(kind, help=text, description=text + "; always exits 0.")
        hook.set_defaults(func=_run)
    sync = kinds.add_parser("sync", help="post what the hooks missed, from sacct (idempotent)")
    sync.add_argument("--since", default="now-2days",
                      help="sacct -S: runs since then (default now-2days)")
    sync.add_argument("--until", default="now", help="sacct -E (default now)")
    sync.add_argument("--jobs", default=None,
                      help="comma-separated Slurm job ids instead of a time window")
    sync.add_argument("--cluster", default=os.environ.get("SLURM_CLUSTER_NAME", "cluster"),
                      help="cluster name for rows that do not say (default $SLURM_CLUSTER_NAME)")
    sync.add_argument("--dry-run", action="store_true", help="print the events, send nothing")
    sync.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    return run(args.slurm_command, args)


def run(kind: str, args: argparse.Namespace | None = None) -> int:
    log = _log(kind)
    dry = bool(args is not None and getattr(args, "dry_run", False))
    try:
        target = None if dry else target_from_env(os.environ)
    except ConfigError as exc:
        log(f"configuration: {exc}")
        return 0 if kind in ("prolog", "epilog") else 2
    if kind in ("prolog", "epilog"):
        assert target is not None
        try:
            run_hook(kind, os.environ, target, log)
        except Exception as exc:  # a hook never fails the job, whatever went wrong
            log(f"unexpected error, nothing sent: {type(exc).__name__}: {exc}")
        return 0
    assert args is not None
    return _sync(args, target, log)


def _sync(args: argparse.Namespace, target: Target | None, log) -> int:
    try:
        if args.jobs:
            job_ids = [j.strip() for j in args.jobs.split(",") if j.strip().isdigit()]
        else:
            job_ids = sacct.jobs_since(args.since, args.until)
        runs = sacct.reconcile_runs(job_ids, args.cluster, log)
    except sacct.SlurmMissing as exc:
        log(str(exc))
        return 1
    except (RuntimeError, OSError) as exc:
        log(f"sacct failed: {exc}")
        return 1
    events = [e for r in runs for e in events_of(r, target.default_gpus if target else 1)]
    if target is None:
        import json

        for event in events:
            print(json.dumps(event))
        return 0
    flush(target, log)
    undelivered = 0
    for i in range(0, len(events), BATCH):
        if not deliver(target, events[i:i + BATCH], log):
            undelivered += 1
    log(f"{len(job_ids)} jobs, {len(runs)} runs, {len(events)} events"
        f"{f', {undelivered} batches spooled' if undelivered else ''}")
    return 0 if not undelivered else 1


def main(argv: Sequence[str]) -> int:
    """`ett slurm ...` without the rest of the program."""
    parser = argparse.ArgumentParser(prog="ett")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    return int(args.func(args))
