"""`python -m bench [--quick] [--only NAME ...] [--fleet-models N] [--fleet-days D] [--runs N]
[--scale S]`."""

from __future__ import annotations

import argparse
import logging
import sys
import time
import traceback

from . import (
    advice,
    aggregate_by_age,
    aggregation,
    console,
    engine,
    fleet_180d,
    impact,
    ingest,
    ingest_window,
    loop_stall,
    otlp,
    reads,
    retry_batch,
    sdk,
    sdk_restart,
    single,
    slow_clients,
    small_writers,
    store_trips,
)
from .common import Postgres

# name -> (module, needs PostgreSQL)
BENCHMARKS = {
    "engine": (engine, False),
    "sdk": (sdk, False),
    "ingest_batch": (ingest, True),
    "ingest_single": (single, True),
    "ingest_store_trips": (store_trips, True),
    "ingest_retry_batch": (retry_batch, True),
    "aggregation": (aggregation, True),
    "aggregate_by_age": (aggregate_by_age, True),
    "reads": (reads, True),
    "console": (console, True),
    "otlp": (otlp, False),
    "advice": (advice, True),
    "slow_clients": (slow_clients, True),
    "impact": (impact, True),
    "ingest_window": (ingest_window, True),
    "loop_stall": (loop_stall, True),
    "fleet_180d": (fleet_180d, True),
    "small_writers": (small_writers, True),
    "sdk_restart": (sdk_restart, True),
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--quick", action="store_true",
                   help="small sizes and short runs (CI): checks the benchmarks run")
    p.add_argument("--only", action="append", choices=sorted(BENCHMARKS), metavar="NAME",
                   help=f"run only this benchmark (repeatable): {', '.join(BENCHMARKS)}")
    p.add_argument("--fleet-models", type=int, default=None,
                   help="aggregation fleet size in models (default 500; quick 20)")
    p.add_argument("--fleet-days", type=float, default=None,
                   help="aggregation history in days (default 3; quick 1)")
    p.add_argument("--runs", type=int, default=None,
                   help="aggregation: measured runs (default 5, quick 2; fewer for a"
                        " full-size fleet); fleet_180d: recompute and scan pairs (default 1)")
    p.add_argument("--scale", type=float, default=None,
                   help="fleet_180d: the share of its 180 days to run (default 1; quick 0.01);"
                        " aggregate_by_age: the share of its 1,000 jobs (default 1)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    names = args.only or list(BENCHMARKS)
    pg = Postgres()
    if any(BENCHMARKS[n][1] for n in names):
        pg.start()
    failed = []
    try:
        for name in names:
            module, _ = BENCHMARKS[name]
            print(f"== {name}{' (quick)' if args.quick else ''}", flush=True)
            t0 = time.perf_counter()
            try:
                if name == "aggregation":
                    module.run(pg, args.quick, models=args.fleet_models, days=args.fleet_days,
                               runs=args.runs)
                elif name in ("fleet_180d", "aggregate_by_age"):
                    module.run(pg, args.quick, scale=args.scale, runs=args.runs)
                else:
                    module.run(pg, args.quick)
            except Exception:
                traceback.print_exc()
                failed.append(name)
            print(f"   ({time.perf_counter() - t0:.0f} s)", flush=True)
    finally:
        pg.stop()
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
