"""`ett demo`: post a simulated fleet through the HTTP API (back-fill, then live)."""

from __future__ import annotations

import argparse
import threading

from service.demo.fleet import Regression
from service.demo.poster import DemoOptions, run_demo

from .failures import UsageProblem, token_of


def _scenario(args: argparse.Namespace, token: str) -> int:
    from datetime import UTC, datetime

    from service.demo import showcase
    from service.demo.poster import Poster

    now = datetime.now(UTC)
    poster = Poster(args.url, token)
    if args.scenario == "paired":
        showcase.post_paired(poster, now, print)
    elif args.scenario == "worked-example":
        showcase.post_worked_example(poster, now, print)
    elif not showcase.post_rollout(poster, now, print):
        return 1
    print(f"posted: accepted={poster.accepted} duplicates={poster.duplicates}"
          f" rejected={poster.rejected}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    if args.table:
        if args.scenario != "paired":
            raise UsageProblem("--table is for --scenario paired")
        from service.demo.paired import paired_table

        print(paired_table())
        return 0
    token = token_of(args, "demo")
    if args.scenario != "fleet":
        return _scenario(args, token)
    try:
        regressions = tuple(Regression.parse(r) for r in args.regress)
    except ValueError as exc:
        raise UsageProblem(str(exc)) from None
    opts = DemoOptions(
        days=args.days, live=args.live, seed=args.seed, models=args.models,
        regressions=regressions,
        time_scale=args.time_scale, failure_rate_per_hour=args.failure_rate,
        progress=not args.no_progress,
    )
    stop = threading.Event()
    try:
        poster = run_demo(args.url, token, opts, stop)
    except KeyboardInterrupt:
        stop.set()
        return 130
    print(f"posted: accepted={poster.accepted} duplicates={poster.duplicates}"
          f" rejected={poster.rejected}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("demo", help="post a realistic simulated fleet through the API")
    p.add_argument("--url", default="http://127.0.0.1:8080", help="the service's base URL")
    p.add_argument("--token", default=None, help="a writer or admin token")
    p.add_argument("--days", type=float, default=2.0, help="days of history to back-fill")
    p.add_argument("--live", action="store_true", help="keep posting in real time")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--models", type=int, default=24)
    p.add_argument("--regress", action="append", default=[], metavar="COMPONENT=FACTORx[:TEAM]",
                   help="multiply a component's durations, e.g. compilation=3x:ads")
    p.add_argument("--time-scale", type=float, default=1.0,
                   help="run the simulated fleet this many times faster than real time")
    p.add_argument("--failure-rate", type=float, default=None,
                   help="interruptions per job-hour of training (default 0.015)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--scenario", choices=("fleet", "paired", "rollout", "worked-example"),
                   default="fleet",
                   help="fleet: the simulated fleet; paired: six models run baseline and"
                        " optimized; rollout: six weeks of annotated changes landing;"
                        " worked-example: docs/model.md's worked example (ETT 0.5625)")
    p.add_argument("--table", action="store_true",
                   help="with --scenario paired: print docs/impact.md's table and post nothing")
    p.set_defaults(func=_cmd_demo)
