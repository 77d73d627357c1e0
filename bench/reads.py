"""Target 4: reads. `/v1/ett` for the whole fleet over 28 days grouped by model < 200 ms;
`/metrics` for 500 models < 100 ms.

The fleet (500 models) is generated and aggregated for `days` of history; its hourly
rollup is then replicated back in whole-day blocks until 28 days are covered (and the
segments of the window's first, partial hour likewise), so the read touches as many rows
as a 28-day fleet would, without aggregating 28 days of events on a 2-core machine.
Requests go to a real `ett serve` (aggregator on, so /metrics has its snapshot).
"""

from __future__ import annotations

import statistics
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import text

from . import fleet
from .common import (
    ADMIN_TOKEN,
    Postgres,
    ett_serve,
    fmt,
    libpq_url,
    record,
    spread,
    time_get,
    wait_for_metrics_snapshot,
)

NAME = "reads"


def _aggregate(url: str, now: datetime) -> None:
    from ett_core import Taxonomy
    from service.aggregate import Aggregator
    from service.store.engine import make_engine

    engine = make_engine(url, pool_size=2, statement_timeout_ms=0)
    Aggregator(engine, Taxonomy.default(), clock=lambda: now).run_pass(recompute_all=True)
    engine.dispose()


def _replicate(url: str, now: datetime, days: int, window_days: int = 28) -> int:
    """Copy the rollup of [now - days, now) back in `days`-day blocks to cover the window."""
    from service.store.engine import make_engine
    from service.store.queries import floor_hour

    engine = make_engine(url, pool_size=2, statement_timeout_ms=0)
    hi = floor_hour(now)
    lo = hi - timedelta(days=days)
    edge = floor_hour(now - timedelta(days=window_days))
    with engine.begin() as conn:
        for k in range(1, window_days // days + 2):
            shift = timedelta(days=days * k)
            conn.execute(text(
                "INSERT INTO fleet_hourly SELECT hour - :shift, model, team, component, phase,"
                " owner, settled_gpu_us, unsettled_gpu_us FROM fleet_hourly"
                " WHERE hour >= :lo AND hour < :hi ON CONFLICT DO NOTHING"),
                {"shift": shift, "lo": lo, "hi": hi})
            if lo <= edge + shift < hi:
                conn.execute(text(
                    "INSERT INTO segments SELECT job_id || '-r' || :k, seq, hour - :shift,"
                    " attempt, start_at - :shift, end_at - :shift, gpus, model, team,"
                    " component, phase, owner, settled FROM segments WHERE hour = :h"),
                    {"k": k, "shift": shift, "h": edge + shift})
        # The daily rollup is the hourly one summed by UTC day (what the aggregator keeps).
        conn.execute(text("TRUNCATE fleet_daily"))
        conn.execute(text(
            "INSERT INTO fleet_daily SELECT date_trunc('day', hour, 'UTC'), model, team,"
            " component, phase, owner, sum(settled_gpu_us), sum(unsettled_gpu_us)"
            " FROM fleet_hourly GROUP BY 1, 2, 3, 4, 5, 6"))
        # And the weekly one is the daily one summed by UTC week (from Monday).
        conn.execute(text("TRUNCATE fleet_weekly"))
        conn.execute(text(
            "INSERT INTO fleet_weekly SELECT date_trunc('week', day, 'UTC'), model, team,"
            " component, phase, owner, sum(settled_gpu_us), sum(unsettled_gpu_us)"
            " FROM fleet_daily GROUP BY 1, 2, 3, 4, 5, 6"))
        # The team and model rollups are the fleet's rows summed (what the aggregator keeps).
        _summed_rollups(conn)
        conn.execute(text("ANALYZE fleet_daily"))
        conn.execute(text("ANALYZE fleet_weekly"))
        conn.execute(text("ANALYZE fleet_hourly"))
        conn.execute(text("ANALYZE segments"))
        rows = conn.execute(text("SELECT count(*) FROM fleet_hourly")).scalar_one()
    engine.dispose()
    return rows


def _summed_rollups(conn: Any) -> None:
    from ett_core.taxonomy import COMPONENTS

    held = "settled_gpu_us + unsettled_gpu_us"
    figures = ", ".join([
        *(f"coalesce(sum({held}) FILTER (WHERE component = '{c}'), 0)" for c in COMPONENTS),
        "coalesce(sum(unsettled_gpu_us) FILTER (WHERE component = 'effective_training'), 0)",
        f"coalesce(sum({held}) FILTER (WHERE phase = 'unreported'), 0)"])
    for level, column in (("hourly", "hour"), ("daily", "day"), ("weekly", "week")):
        if level != "weekly":
            conn.execute(text(f"TRUNCATE team_{level}"))
            conn.execute(text(
                f"INSERT INTO team_{level} SELECT {column}, team, component, phase, owner,"
                f" sum(settled_gpu_us), sum(unsettled_gpu_us) FROM fleet_{level}"
                f" GROUP BY 1, 2, 3, 4, 5"))
        conn.execute(text(f"TRUNCATE model_{level}"))
        conn.execute(text(f"INSERT INTO model_{level} SELECT {column}, model, team, {figures}"
                          f" FROM fleet_{level} GROUP BY 1, 2, 3"))
        conn.execute(text(f"ANALYZE model_{level}"))


def run(pg: Postgres, quick: bool) -> dict[str, Any]:
    models, days = (20, 1) if quick else (500, 1)
    url = pg.create_database("bench_reads")
    now = datetime.now(UTC).replace(microsecond=0)
    n_events, _ = fleet.generate(libpq_url(url), models, days, now)
    _aggregate(url, now)
    hourly_rows = _replicate(url, now, days)
    print(f"fleet: {models} models, {n_events} events over {days} d, fleet_hourly rows"
          f" replicated to 28 d: {hourly_rows}", flush=True)
    runs = 7
    with ett_serve(url, aggregator=True, env={"ETT_AGGREGATE_INTERVAL_S": "3600"}) as srv, \
            httpx.Client(base_url=srv.url, timeout=60,
                         headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) as client:
        wait_for_metrics_snapshot(client, 300)
        start = (datetime.now(UTC) - timedelta(days=28)).isoformat().replace("+00:00", "Z")
        ett_ms, ett_bytes = time_get(client, f"/v1/ett?group_by=model&start={start}", runs)
        metrics_ms, metrics_bytes = time_get(client, "/metrics", runs)
        n_groups = len(client.get(f"/v1/ett?group_by=model&start={start}").json()["groups"])
    pg.drop_database(url)
    ett, met = spread(ett_ms, 1), spread(metrics_ms, 1)
    figures = {"models": models, "events": n_events, "fleet_hourly_rows": hourly_rows,
               "ett_28d_by_model_ms": ett, "ett_groups": n_groups, "ett_bytes": ett_bytes,
               "metrics_ms": met, "metrics_bytes": metrics_bytes,
               "metrics_mean_ms": round(statistics.mean(metrics_ms), 1)}
    print(f"/v1/ett 28 d by model ({n_groups} groups): {fmt(ett, ' ms')};"
          f" /metrics ({metrics_bytes} bytes): {fmt(met, ' ms')}")
    judged = not quick
    return record(NAME, quick, figures, [
        (f"/v1/ett, whole fleet, 28 d, group_by=model ({n_groups} models) < 200 ms",
         fmt(ett, " ms"), ett["median"] < 200 if judged else None),
        (f"/metrics for {models} models < 100 ms", f"{fmt(met, ' ms')} ({metrics_bytes} bytes)",
         met["median"] < 100 if judged else None),
    ])
