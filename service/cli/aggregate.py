"""`ett aggregate`: one pass, `--loop`, or `--recompute-all` after a taxonomy change."""

from __future__ import annotations

import argparse
import os
import signal
import threading

from prometheus_client import CollectorRegistry, start_http_server


def _run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from service.aggregate import build_aggregator
    from service.gc_settings import tune_gc
    from service.store import migrate
    from service.store.engine import open_database

    settings = args.settings
    with open_database(settings, pool_size=2) as db:
        if not migrate.is_at_head(db.engine):
            print("database schema is not at head: run `ett migrate` first")
            return 2
        aggregator = build_aggregator(settings, db.engine)
        tune_gc()
        if not args.loop:
            bar = tqdm(desc="recompute", unit="job", disable=not args.recompute_all)

            def progress(done: int, total: int) -> None:
                bar.total = total
                bar.n = done
                bar.refresh()

            if args.recompute_all:
                from service.aggregation.recompute import recompute_all

                report = recompute_all(db.url, settings, max(1, args.workers), progress)
            else:
                report = aggregator.run_pass(progress=progress)
            bar.close()
            print(f"recomputed {report.jobs_recomputed} jobs in {report.duration_seconds:.2f}s"
                  f" (failed {report.jobs_failed}, skipped {report.jobs_skipped_locked} held by"
                  " another aggregator)")
            return 1 if report.jobs_failed else 0
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        registry = CollectorRegistry()
        from service.metrics.collector import register_aggregator_metrics

        register_aggregator_metrics(registry, aggregator, db.engine,
                                    settings.metrics_max_models_per_team,
                                    settings.metrics_max_teams)
        if args.metrics_port:
            start_http_server(args.metrics_port, addr=args.metrics_host, registry=registry)
            print(f"aggregator metrics on http://{args.metrics_host}:{args.metrics_port}/metrics")
        try:
            aggregator.run_loop(args.interval or settings.aggregate_interval_s, stop)
        except KeyboardInterrupt:
            stop.set()
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("aggregate", help="run aggregation: one pass, or --loop")
    p.add_argument("--loop", action="store_true", help="keep running passes")
    p.add_argument("--interval", type=float, default=None, help="seconds between passes")
    p.add_argument("--recompute-all", action="store_true",
                   help="recompute every job (after a taxonomy change), with a progress bar")
    p.add_argument("--workers", type=int, default=min(4, os.cpu_count() or 1),
                   help="with --recompute-all: processes sharing the work, a chunk of jobs"
                        " at a time (default: the CPUs, at most 4)")
    p.add_argument("--metrics-port", type=int, default=None,
                   help="with --loop: serve /metrics on this port")
    p.add_argument("--metrics-host", default="0.0.0.0")
    p.set_defaults(func=_run)
