"""Target 1: 1000-event batches through the whole ingest path vs direct COPY.

A real `ett serve --no-aggregator` on the embedded PostgreSQL; a load generator process
(bench.loadgen) with pre-built bodies posts from several connections; in the same run, and
interleaved with it, the same generator COPYs the same kind of events (fresh ids) into the
same `events` table (same indexes, same server) in 1000-row transactions from as many
connections. Target: HTTP rate >= 75% of the COPY rate.
"""

from __future__ import annotations

from typing import Any

from .common import ADMIN_TOKEN, Postgres, ett_serve, fmt, libpq_url, record, run_json, spread

NAME = "ingest_batch"


def run(pg: Postgres, quick: bool) -> dict[str, Any]:
    url = pg.create_database("bench_ingest")
    batches = 8 if quick else 40
    clients = 4
    with ett_serve(url) as srv:
        out = run_json(["bench.loadgen", "batch", "--url", srv.url, "--token", ADMIN_TOKEN,
                        "--dsn", libpq_url(url), "--clients", str(clients),
                        "--batches", str(batches), "--runs", "5"])
    pg.drop_database(url)
    http, copy = spread(out["http_events_per_s"], 0), spread(out["copy_events_per_s"], 0)
    ratios = [h / c for h, c in zip(out["http_events_per_s"], out["copy_events_per_s"],
                                    strict=True)]
    ratio = spread(ratios)
    print(f"batch ingest ({clients} clients, {batches} x 1000-event batches per run):"
          f" HTTP {fmt(http, ' ev/s', 0)}, COPY {fmt(copy, ' ev/s', 0)},"
          f" ratio {fmt(ratio, '', 2)}, errors {out['errors']}")
    figures = {"http_events_per_s": http, "copy_events_per_s": copy, "ratio": ratio,
               "errors": out["errors"], "clients": clients, "batches_per_run": batches,
               "batch_size": 1000}
    judged = None if quick else True
    return record(NAME, quick, figures, [
        ("HTTP ingest >= 75% of direct COPY (same run)", fmt(ratio, "", 2),
         None if judged is None else ratio["median"] >= 0.75 and out["errors"] == 0),
        ("ingest rate, 1000-event batches, embedded PostgreSQL (plain figure)",
         fmt(http, " events/s", 0), None),
        ("direct COPY rate, same batches and table", fmt(copy, " events/s", 0), None),
    ])
