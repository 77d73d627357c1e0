"""Target 3: aggregation of a simulated fleet.

* full recompute of the fleet within 2x of a plain SQL scan of the same events in job/time
  order (psycopg server-side cursor, every row fetched into Python), alternated in the
  same run: `ett aggregate --recompute-all` as it runs by default (one process per CPU, at
  most 4, sharing the models: service/aggregation/recompute.py), and in one process;
* an incremental pass after one minute of live traffic (the fleet's next minute, stored
  through the ingest path's `store`) under 1 s, by an aggregator that made the pass
  before (as a running service has: its cache of running jobs is warm);
* peak RSS of the aggregating process at two history lengths (it must not grow with
  history: the aggregator works in chunks of jobs).

Each measurement runs in a fresh process (bench.agg_worker). The fleet is 500 models by
default; its history length is a parameter (`--fleet-days`; the full 180 days is ~40M
events here, ~20 GB with its results, a long run on a 2-core machine). The target is a
ratio, measured at whatever size ran; per-event rates extrapolate to the full size.

Every measured recompute replaces results that exist (an unmeasured recompute writes them
first), as after a taxonomy change in a running deployment. Before each measurement the
tables are vacuumed and a checkpoint is taken, as pgbench does before its runs: otherwise
each recompute would find the dead rows of all the earlier ones, a state five recomputes
back to back create and a deployment never has (autovacuum keeps up with one).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from . import fleet
from .common import Postgres, fmt, libpq_url, record, run_json, spread

NAME = "aggregation"
FULL_DAYS = 180
FULL_MODELS = 500


def _cutoff() -> datetime:
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    return now - timedelta(minutes=10)


def build(pg: Postgres, models: int, days: float, live_s: float) -> tuple[str, int, list[Any],
                                                                            datetime]:
    url = pg.create_database("bench_agg")
    cutoff = _cutoff()
    n, live = fleet.generate(libpq_url(url), models, days, cutoff, live_s)
    return url, n, live, cutoff


def settle(url: str) -> None:
    """Vacuum the tables and checkpoint, so that each measurement starts alike."""
    import psycopg

    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        with contextlib.suppress(psycopg.errors.InsufficientPrivilege):  # not our server
            conn.execute("CHECKPOINT")


def run(pg: Postgres, quick: bool, models: int | None = None,
        days: float | None = None, runs: int | None = None) -> dict[str, Any]:
    models = models or (20 if quick else FULL_MODELS)
    days = days or (1.0 if quick else 3.0)
    runs = runs or (2 if quick else 5)  # quick: checks it runs (CI), measures nothing
    url, n_events, live, cutoff = build(pg, models, days, live_s=5 * 60)
    print(f"fleet: {models} models x {days:g} days = {n_events} events", flush=True)
    workers = min(4, os.cpu_count() or 1)
    scans, fulls, singles, rss = [], [], [], []
    jobs = 0
    run_json(["bench.agg_worker", "full", url, cutoff.isoformat(), str(workers)])
    for _ in range(runs):
        settle(url)
        s = run_json(["bench.agg_worker", "scan", url])
        settle(url)
        f = run_json(["bench.agg_worker", "full", url, cutoff.isoformat(), str(workers)])
        settle(url)
        one = run_json(["bench.agg_worker", "full", url, cutoff.isoformat(), "1"])
        scans.append(s["seconds"])
        fulls.append(f["seconds"])
        singles.append(one["seconds"])
        rss.append(one["peak_rss_mb"])
        jobs = f["jobs"]
        print(f"  scan {s['seconds']:.2f} s, full recompute {f['seconds']:.2f} s with"
              f" {workers} processes, {one['seconds']:.2f} s in one ({f['jobs']} jobs),"
              f" peak RSS {one['peak_rss_mb']:.0f} MB", flush=True)
    minutes: list[list[dict[str, Any]]] = [[] for _ in range(5)]
    for ev in live:
        t = datetime.fromisoformat(ev["ts"].replace("Z", "+00:00"))
        k = min(4, int((t - cutoff).total_seconds() // 60))
        minutes[k].append(ev)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(minutes, fh)
    inc = run_json(["bench.agg_worker", "incremental", url, cutoff.isoformat(), fh.name])
    Path(fh.name).unlink()
    pg.drop_database(url)
    # The same fleet with half the history: peak RSS must not follow history length.
    url2, n_half, _, cutoff2 = build(pg, models, days / 2, 0)
    half = run_json(["bench.agg_worker", "full", url2, cutoff2.isoformat()])
    pg.drop_database(url2)

    ratios = [f / s for f, s in zip(fulls, scans, strict=True)]
    full_s, scan_s, ratio = spread(fulls, 2), spread(scans, 2), spread(ratios, 2)
    single_s = spread(singles, 2)
    single_ratio = spread([f / s for f, s in zip(singles, scans, strict=True)], 2)
    inc_s = spread(inc["seconds_each"], 3)
    per_event_us = full_s["median"] / n_events * 1e6
    full_size = FULL_MODELS * FULL_DAYS * (n_events / (models * days))
    figures = {
        "models": models, "days": days, "events": n_events, "jobs": jobs,
        "scan_s": scan_s, "full_recompute_s": full_s, "ratio_full_to_scan": ratio,
        "workers": workers, "full_one_process_s": single_s,
        "ratio_one_process_to_scan": single_ratio,
        "full_us_per_event": round(per_event_us, 2),
        "scan_us_per_event": round(scan_s["median"] / n_events * 1e6, 2),
        "incremental_s": inc_s, "incremental_jobs": inc["jobs_each"],
        "incremental_cache": inc["cache"],
        "live_events_per_minute": [len(m) for m in minutes],
        "peak_rss_mb": {f"{days:g}d": max(rss), f"{days / 2:g}d": half["peak_rss_mb"]},
        "events_half_history": n_half,
        "extrapolated_full_fleet": {"events": round(full_size),
                                    "full_recompute_min": round(full_size * per_event_us
                                                                / 6e7, 1)},
    }
    print(f"full recompute {fmt(full_s, ' s', 2)} vs scan {fmt(scan_s, ' s', 2)}:"
          f" ratio {fmt(ratio, '', 2)}; incremental {fmt(inc_s, ' s', 3)};"
          f" peak RSS {max(rss):.0f} MB ({days:g} d) vs {half['peak_rss_mb']:.0f} MB"
          f" ({days / 2:g} d)")
    judged = not quick
    extrapolated_min = figures["extrapolated_full_fleet"]["full_recompute_min"]
    rss_ok = max(rss) <= 1.25 * half["peak_rss_mb"]
    size = f"{models} models x {days:g} d, {n_events} events"
    return record(NAME, quick, figures, [
        (f"full recompute <= 2x plain scan in job/time order ({size}; {workers} processes)",
         f"{fmt(ratio, 'x', 2)} (full {fmt(full_s, ' s', 2)}, scan {fmt(scan_s, ' s', 2)})",
         ratio["median"] <= 2 if judged else None),
        ("full recompute in one process, same runs",
         f"{fmt(single_ratio, 'x', 2)} ({fmt(single_s, ' s', 2)})", None),
        ("incremental pass after 1 minute of live traffic < 1 s",
         f"{fmt(inc_s, ' s', 3)} ({inc['jobs_each'][0]} jobs, "
         f"{len(minutes[0])} events/min)", inc_s["max"] < 1 if judged else None),
        ("peak RSS does not grow with history length",
         f"{max(rss):.0f} MB at {days:g} d, {half['peak_rss_mb']:.0f} MB at {days / 2:g} d",
         rss_ok if judged else None),
    ] + ([] if models >= FULL_MODELS and days >= FULL_DAYS else [
        ("full 500 x 180 d fleet (extrapolated from per-event rate, not run)",
         f"~{full_size / 1e6:.0f}M events, ~{extrapolated_min} min full recompute", None),
    ]))



