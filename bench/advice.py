"""Checkpoint advice: one model's advice over 30 days < 100 ms; every model's (the
Fleet dashboard's list and `ett advise checkpoints`) < 1 s for 500 models; and what
writing `checkpoint_attempts` adds to an aggregation pass.

The fleet is generated and aggregated for `days` of history; its `checkpoint_attempts`
rows are then replicated back in whole-day blocks to cover 30 days, so the reads touch
as many rows as a 30-day fleet would, without aggregating 30 days of events on 2 cores.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text

from . import fleet
from .common import Postgres, fmt, libpq_url, record, spread, time_calls

NAME = "advice"
WINDOW_DAYS = 30


def _replicate(engine: Any, days: int) -> int:
    with engine.begin() as conn:
        for k in range(1, WINDOW_DAYS // days + 1):
            conn.execute(text(
                "INSERT INTO checkpoint_attempts SELECT job_id || '-r' || :k, attempt, model,"
                " team, started_at - :shift, gpus, held_us, interrupted, blocking_save_us,"
                " durable_checkpoints, intervals_us, lost_progress_us, ttr_us"
                " FROM checkpoint_attempts WHERE job_id NOT LIKE '%-r%'"),
                {"k": k, "shift": timedelta(days=days * k)})
        conn.execute(text("ANALYZE checkpoint_attempts"))
        return conn.execute(text("SELECT count(*) FROM checkpoint_attempts")).scalar_one()


def _write_cost(engine: Any, now: datetime) -> tuple[float, int]:
    """Milliseconds to replace every job's checkpoint facts once (rolled back)."""
    from ett_core import Taxonomy, compute_job
    from ett_core.instants import dt_to_us
    from service.store import results as store
    from service.store.result_rows import replace_checkpoint_facts

    with engine.connect() as conn:
        jobs = [r[0] for r in conn.execute(text("SELECT job_id FROM jobs"))]
        events = store.load_events(conn, jobs)
    now_us = dt_to_us(now)
    computed = {j: compute_job(events[j], taxonomy=Taxonomy.default(), now_us=now_us,
                               heartbeat_timeout_us=600_000_000) for j in jobs if events.get(j)}
    with engine.connect() as conn, conn.begin() as tx:
        t0 = time.perf_counter()
        replace_checkpoint_facts(conn, jobs, computed)
        ms = (time.perf_counter() - t0) * 1000
        tx.rollback()
    return ms, len(jobs)


def run(pg: Postgres, quick: bool) -> dict[str, Any]:
    from ett_core import Taxonomy
    from service.aggregate import Aggregator
    from service.results.checkpoint_advice import checkpoint_advice, fleet_checkpoint_advice
    from service.store.engine import make_engine

    models, days = (20, 1) if quick else (500, 1)
    url = pg.create_database("bench_advice")
    now = datetime.now(UTC).replace(microsecond=0)
    n_events, _ = fleet.generate(libpq_url(url), models, days, now)
    engine = make_engine(url, pool_size=2, statement_timeout_ms=0)
    t0 = time.perf_counter()  # the pass's own report reads the frozen clock
    Aggregator(engine, Taxonomy.default(), clock=lambda: now).run_pass(recompute_all=True)
    pass_ms = (time.perf_counter() - t0) * 1000
    write_ms, n_jobs = _write_cost(engine, now)
    rows = _replicate(engine, days)
    print(f"fleet: {models} models, {n_events} events over {days} d, {n_jobs} jobs;"
          f" checkpoint_attempts rows replicated to {WINDOW_DAYS} d: {rows}", flush=True)
    start = now - timedelta(days=WINDOW_DAYS)
    with engine.connect() as conn:
        model = conn.execute(text("SELECT model FROM checkpoint_attempts GROUP BY model"
                                  " ORDER BY count(*) DESC LIMIT 1")).scalar_one()
    runs = 3 if quick else 7
    one = spread(time_calls(lambda: checkpoint_advice(engine, model, start, now), runs), 1)
    every = spread(time_calls(lambda: fleet_checkpoint_advice(engine, start, now), runs), 1)
    listed = fleet_checkpoint_advice(engine, start, now)
    ok = sum(a["status"] == "ok" for a in listed)
    engine.dispose()
    pg.drop_database(url)
    figures = {"models": models, "events": n_events, "jobs": n_jobs,
               "checkpoint_attempts_rows": rows, "one_model_ms": one, "every_model_ms": every,
               "models_listed": len(listed), "models_with_advice": ok,
               "facts_write_ms": round(write_ms, 1), "recompute_pass_ms": round(pass_ms, 1),
               "facts_write_share_of_pass": round(write_ms / pass_ms, 4)}
    print(f"one model: {fmt(one, ' ms')}; every model ({len(listed)}, {ok} with advice):"
          f" {fmt(every, ' ms')}; facts write {write_ms:.0f} ms for {n_jobs} jobs"
          f" ({figures['facts_write_share_of_pass']:.1%} of a {pass_ms:.0f} ms recompute)")
    judged = not quick
    return record(NAME, quick, figures, [
        (f"checkpoint advice, one model, {WINDOW_DAYS} d < 100 ms", fmt(one, " ms"),
         one["median"] < 100 if judged else None),
        (f"checkpoint advice, every model ({models}), {WINDOW_DAYS} d < 1 s", fmt(every, " ms"),
         every["median"] < 1000 if judged else None),
        ("writing checkpoint_attempts, share of a full recompute pass",
         f"{figures['facts_write_share_of_pass']:.1%} ({write_ms:.0f} of {pass_ms:.0f} ms)",
         None),
    ])
