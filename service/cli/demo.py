"""`ett demo`: post a simulated fleet through the HTTP API (back-fill, then live)."""

from __future__ import annotations

import argparse
import threading

from service.demo.fleet import Regression
from service.demo.poster import DemoOptions, run_demo


def _scenario(args: argparse.Namespace, token: str) -> int:
    from datetime import UTC, datetime

    from service.demo import paired, rollout
    from service.demo.poster import Poster, post_runs

    now = datetime.now(UTC)
    poster = Poster(args.url, token)
    if args.scenario == "paired":
        start = paired.start_for(now)
        post_runs(poster, paired.paired_events(start), now)
        print(f"paired benchmark from {start.isoformat()}: compare with"
              " `ett impact --baseline-label variant:baseline"
              " --candidate-label variant:optimized --model 'paired_*'`")
    else:
        start = rollout.start_for(now)
        post_runs(poster, rollout.rollout_events(start), now)
        for landing in rollout.landings(start):
            r = poster.client.post("/v1/annotations", json=landing.annotation())
            if r.status_code != 201:
                print(f"annotation refused: {r.status_code} {r.text}")
                return 1
            print(f"annotation {r.json()['id']}: {landing.ts.date()} {landing.change}")
        print("compare a change with `ett impact --around ID --days 7 --model 'rollout_*'`")
    print(f"posted: accepted={poster.accepted} duplicates={poster.duplicates}"
          f" rejected={poster.rejected}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    if args.table:
        if args.scenario != "paired":
            print("--table is for --scenario paired")
            return 2
        from service.demo.paired import paired_table

        print(paired_table())
        return 0
    token = args.token or args.settings.admin_token_value()
    if not token:
        data_token = args.settings.data_dir / "admin-token"
        if data_token.exists():
            token = data_token.read_text().strip()
    if not token:
        print("ett demo needs a token: --token, ETT_ADMIN_TOKEN, or the embedded data dir's")
        return 2
    if args.scenario != "fleet":
        return _scenario(args, token)
    opts = DemoOptions(
        days=args.days, live=args.live, seed=args.seed, models=args.models,
        regressions=tuple(Regression.parse(r) for r in args.regress),
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
    p.add_argument("--scenario", choices=("fleet", "paired", "rollout"), default="fleet",
                   help="fleet: the simulated fleet; paired: six models run baseline and"
                        " optimized; rollout: six weeks of annotated changes landing")
    p.add_argument("--table", action="store_true",
                   help="with --scenario paired: print docs/impact.md's table and post nothing")
    p.set_defaults(func=_cmd_demo)
