"""Target 1: 1000-event batches through the whole ingest path vs direct COPY.

A real `ett serve --no-aggregator` on the embedded PostgreSQL; a load generator process
(bench.loadgen) with pre-built bodies posts from several connections; in the same run, and
interleaved with it, the same generator COPYs the same kind of events (fresh ids) into the
same `events` table (same indexes, same server) in 1000-row transactions from as many
connections. Target, in each of the five runs: the API server's CPU per accepted event at
most half of PostgreSQL's CPU per event for the COPY phase of the same run (a ratio of CPU
in one run, so it holds on any machine, however busy). Also reported: the rates, and the
API's peak RSS after each run (it must stay flat).

Three figures explain the ratio: the store path alone (the same bodies validated beforehand,
stored by `store.events.store_rows` from as many connections); the CPU each party spent per
event in each phase (the API server, PostgreSQL's processes, the generator), read from /proc
around each phase; and from those, the API CPU per event at which the ratio of the CPU
totals would reach the target, everything else as measured (on a machine whose cores all
parties share, the rates follow the totals).
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from typing import Any

from service.access.auth import Principal
from service.ingest import parse_batch
from service.wire.batch import validate_batch
from service.wire.whole import decide_whole

from .common import ADMIN_TOKEN, Postgres, ett_serve, fmt, libpq_url, record, run_json, spread

NAME = "ingest_batch"
TARGET = 0.5


def validation_us(quick: bool) -> dict[str, float]:
    """CPU per event of deciding the benchmark's bodies in this process: the whole-batch
    path, and the per-event path it falls back to (JSON parse, then `validate_batch`)."""
    from .loadgen import Ids, http_bodies, template_events

    bodies = http_bodies(template_events(2000), 4 if quick else 20, 1000, Ids(5))
    admin = Principal(role="admin", token_id="bench")
    limits = {"now": datetime.now(UTC), "max_future_s": 300.0, "max_age_s": 400 * 86400.0}
    paths = {
        "whole": lambda b: decide_whole(b, 5000, admin, **limits),
        "per_event": lambda b: validate_batch(parse_batch(b, 5000), admin, **limits),
    }
    out = {}
    for name, decide in paths.items():
        best = float("inf")
        for _ in range(3):  # the least of three: the machine's noise only ever adds
            began = time.process_time()
            for body in bodies:
                decide(body)
            best = min(best, time.process_time() - began)
        out[name] = round(best / (len(bodies) * 1000) * 1e6, 2)
    return out


def cost_split(srv_url: str, pid: int, quick: bool) -> dict[str, float]:
    """The API's CPU per request and per event: batches of 100 and of 1000 events posted to
    the same server, its CPU from /proc, a line through the two points."""
    import asyncio

    from .loadgen import Ids, _proc_cpu, http_bodies, send_batches, template_events

    template, ids, per_size = template_events(2000), Ids(6), (4000 if quick else 40000)
    ms_per_request = {}
    for size in (100, 1000):
        bodies = http_bodies(template, per_size // size, size, ids)
        began = _proc_cpu(pid)
        asyncio.run(send_batches(srv_url, ADMIN_TOKEN, bodies, 4))
        ms_per_request[size] = (_proc_cpu(pid) - began) / len(bodies) * 1e3
    per_event_us = (ms_per_request[1000] - ms_per_request[100]) / 900 * 1e3
    return {"per_request_ms": round(ms_per_request[100] - 100 * per_event_us / 1e3, 2),
            "per_event_us": round(per_event_us, 2)}


def run(pg: Postgres, quick: bool) -> dict[str, Any]:
    validation = validation_us(quick)
    url = pg.create_database("bench_ingest")
    batches = 8 if quick else 40
    clients = 4
    with ett_serve(url) as srv:
        out = run_json(["bench.loadgen", "batch", "--url", srv.url, "--token", ADMIN_TOKEN,
                        "--dsn", libpq_url(url), "--clients", str(clients),
                        "--batches", str(batches), "--runs", "5",
                        "--server-pid", str(srv.pid)])
        split = cost_split(srv.url, srv.pid, quick)
    pg.drop_database(url)
    http, copy = spread(out["http_events_per_s"], 0), spread(out["copy_events_per_s"], 0)
    ratios = [h / c for h, c in zip(out["http_events_per_s"], out["copy_events_per_s"],
                                    strict=True)]
    ratio = spread(ratios)
    store = spread(out["store_events_per_s"], 0)
    store_ratio = spread([s / c for s, c in zip(out["store_events_per_s"],
                                                  out["copy_events_per_s"], strict=True)])
    # CPU per event of each party, per phase: on a machine whose cores all of them share,
    # the rates follow the total, so the ratio of the totals is the ceiling of the ratio.
    per_event: dict[str, dict[str, float]] = {}
    for phase, samples in out["cpu_seconds"].items():
        n = batches * 1000 * len(samples)
        per_event[phase] = {k: round(sum(s[k] for s in samples) / n * 1e6, 2)
                            for k in ("api", "postgres", "loadgen")}
        per_event[phase]["total"] = round(sum(per_event[phase].values()), 2)
    # Target 1, per run: API CPU per accepted event / PostgreSQL CPU per COPYed event (the
    # same number of events in both phases of a run).
    # /proc counts CPU in clock ticks (10 ms) sampled per process: a quick run's COPY can
    # read as no CPU at all, and then the run has no ratio rather than an infinite one.
    target = [round(h["api"] / c["postgres"], 3) if c["postgres"] > 0 else None for h, c in
              zip(out["cpu_seconds"]["http"], out["cpu_seconds"]["copy"], strict=True)]
    held = sum(r is not None and r <= TARGET for r in target)
    n_run = batches * 1000
    api_runs = [round(h["api"] / n_run * 1e6, 2) for h in out["cpu_seconds"]["http"]]
    pg_runs = [round(c["postgres"] / n_run * 1e6, 2) for c in out["cpu_seconds"]["copy"]]
    rss = out["api_rss_mb"]
    peaks = [r["peak"] for r in rss]
    cpu_ceiling = round(per_event["copy"]["total"] / per_event["http"]["total"], 2)
    # The API CPU per event at which the ratio of totals would reach 0.75, the rest as measured.
    api_budget = round(per_event["copy"]["total"] / 0.75 - per_event["http"]["postgres"]
                       - per_event["http"]["loadgen"], 2)
    print(f"batch ingest ({clients} clients, {batches} x 1000-event batches per run):"
          f" HTTP {fmt(http, ' ev/s', 0)}, COPY {fmt(copy, ' ev/s', 0)},"
          f" ratio {fmt(ratio, '', 2)}, errors {out['errors']}")
    print(f"  target 1, API CPU per event / PostgreSQL COPY CPU per event, per run: {target}"
          f" (<= {TARGET}: {held}/{len(target)} held{'' if held == len(target) else ', NOT MET'})")
    print(f"  deciding the bodies in-process, CPU us per event: whole-batch path"
          f" {validation['whole']}, per-event path {validation['per_event']}")
    print(f"  API CPU split (batches of 100 and 1000): {split['per_request_ms']} ms per"
          f" request + {split['per_event_us']} us per event")
    print(f"  per run, CPU us per event: API {api_runs}, PostgreSQL (COPY) {pg_runs}")
    print(f"  API RSS after each run (MiB): now {[r['now'] for r in rss]}, peak {peaks}")
    print(f"  store path alone (validated beforehand, 4 connections): {fmt(store, ' ev/s', 0)},"
          f" ratio to COPY {fmt(store_ratio, '', 2)}")
    print(f"  CPU us per event: HTTP path {per_event['http']}, COPY {per_event['copy']};"
          f" CPU-bound ceiling of the ratio {cpu_ceiling};"
          f" API CPU per event that would allow 0.75: {api_budget} us")
    figures = {"http_events_per_s": http, "copy_events_per_s": copy, "ratio": ratio,
               "errors": out["errors"], "clients": clients, "batches_per_run": batches,
               "batch_size": 1000, "store_events_per_s": store, "store_ratio": store_ratio,
               "cpu_us_per_event": per_event, "cpu_ceiling": cpu_ceiling,
               "api_budget_us_for_target": api_budget,
               "target_ratio_per_run": target, "target_held_runs": held,
               "api_cpu_us_per_run": api_runs, "copy_postgres_cpu_us_per_run": pg_runs,
               "validation_cpu_us_per_event": validation, "api_cpu_split": split,
               "api_rss_mb_per_run": rss,
               "cpus": os.cpu_count()}
    judged = None if quick else True
    return record(NAME, quick, figures, [
        (f"API CPU per accepted event <= {TARGET} x PostgreSQL's CPU per COPYed event,"
         " every run", f"{held}/{len(target)} held ({', '.join(map(str, target))});"
         f" API {per_event['http']['api']} us, PostgreSQL (COPY) {per_event['copy']['postgres']}"
         " us per event",
         None if judged is None else held == len(target) and out["errors"] == 0),
        ("HTTP ingest rate / direct COPY rate (same run; plain figure)", fmt(ratio, "", 2),
         None),
        ("API CPU per request and per event (batches of 100 and 1000, same server)",
         f"{split['per_request_ms']} ms + {split['per_event_us']} us per event", None),
        ("deciding a 1000-event body in-process: whole-batch path vs per-event path",
         f"{validation['whole']} us vs {validation['per_event']} us per event", None),
        ("API peak RSS after each run (flat: the last within 10% of the first)",
         f"{peaks} MiB", None if judged is None else peaks[-1] <= 1.1 * peaks[0]),
        ("ingest rate, 1000-event batches, embedded PostgreSQL (plain figure)",
         fmt(http, " events/s", 0), None),
        ("direct COPY rate, same batches and table", fmt(copy, " events/s", 0), None),
        ("the store path alone (validated beforehand) vs direct COPY, same run",
         f"{fmt(store_ratio, '', 2)} ({fmt(store, ' events/s', 0)})", None),
        ("CPU per event (API + PostgreSQL + load generator), HTTP path vs COPY",
         f"{per_event['http']['total']} us vs {per_event['copy']['total']} us"
         f" (API {per_event['http']['api']}, PostgreSQL {per_event['http']['postgres']}"
         f" vs {per_event['copy']['postgres']}); ratio of totals {cpu_ceiling}", None),
        ("API CPU per event at which the ratio of totals would reach 0.75 (the rest as measured)",
         f"{api_budget} us (measured: {per_event['http']['api']} us)", None),
    ])
