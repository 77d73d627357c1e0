"""Issue 29 target 2: incremental cost follows change, not age.

* one new heartbeat for a running job 30 days old costs the aggregator at most 2x what it
  costs for a job 1 day old (same events per hour): each job alone in its own database,
  a warm aggregator (it made the pass before, as a running service has), then per run one
  heartbeat stored through the ingest path's `store` and one pass timed;
* an incremental pass after one minute of live traffic from 1,000 running jobs aged 1-30
  days finishes in under 1 s (the same warm aggregator; `--scale` runs fewer jobs).

Every job has the shape of a continuous trainer: allocated, initialization, then training
for ever, a heartbeat with its step every 20 s and a checkpoint save every 30 minutes
(186 events an hour). Both parts run twice in the same process and database, with the
incremental path off (`incremental=False`: every changed job computed from all its events)
and on, so the before/after figures come from the same run.
"""

from __future__ import annotations

import gc
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from .common import Postgres, fmt, libpq_url, record, spread
from .loadgen import COPY_COLUMNS, _copy_field

NAME = "aggregate_by_age"
HEARTBEAT_S = 20
SAVE_EVERY_S = 1800
SAVE_S = 60
GPUS = 8


def _ev(job: str, t: float, kind: str, **extra: Any) -> dict[str, Any]:
    ts = datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")
    return {"event_id": str(uuid.uuid4()), "ts": ts, "job_id": job, "attempt": 0,
            "model": f"model-{job}", "type": kind, "team": "bench", **extra}


def job_events(job: str, start: float, until: float) -> Iterator[dict[str, Any]]:
    """A continuous trainer's events in [start, until]."""
    yield _ev(job, start, "allocated", gpus=GPUS)
    yield _ev(job, start, "phase_start", phase="pre_train")
    yield _ev(job, start + 300, "phase_end", phase="pre_train")
    yield _ev(job, start + 300, "phase_start", phase="training")
    t, step, next_save = start + 300 + HEARTBEAT_S, 0, start + 300 + SAVE_EVERY_S
    while t <= until:
        step += 1
        yield _ev(job, t, "heartbeat", attrs={"step": step, "loss": 1.0 / step})
        if t >= next_save:
            yield _ev(job, t, "phase_start", phase="checkpoint_save")
            yield _ev(job, t + SAVE_S, "checkpoint", attrs={"step": step})
            yield _ev(job, t + SAVE_S, "phase_end", phase="checkpoint_save")
            next_save += SAVE_EVERY_S
        t += HEARTBEAT_S


def copy_jobs(dsn: str, jobs: list[tuple[str, float]], until: float) -> int:
    """COPY each (job, start) job's events up to `until`; return how many."""
    import psycopg

    n = 0
    sql = f"COPY events ({', '.join(COPY_COLUMNS)}) FROM STDIN"
    with psycopg.connect(dsn) as conn:
        for job, start in jobs:
            lines = ["\t".join(_copy_field(ev.get(c)) for c in COPY_COLUMNS)
                     for ev in job_events(job, start, until)]
            with conn.transaction(), conn.cursor() as cur, cur.copy(sql) as copy:
                copy.write(("\n".join(lines) + "\n").encode())
            n += len(lines)
        conn.execute("INSERT INTO dirty_jobs (job_id) SELECT unnest(%s::text[])",
                     ([j for j, _ in jobs],))
        conn.commit()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    return n


class Live:
    """A warm aggregator over one database, and the ingest path to feed it."""

    def __init__(self, url: str, now: datetime, incremental: bool) -> None:
        from ett_core import Taxonomy
        from service.aggregate import Aggregator
        from service.gc_settings import tune_gc
        from service.store.engine import make_engine

        self.engine = make_engine(url, pool_size=2, statement_timeout_ms=0)
        # The collector as `ett aggregate` and `ett serve` run it (put back on close: the
        # other benchmarks of the process run with Python's defaults).
        self.thresholds = gc.get_threshold()
        tune_gc()
        self.now = now
        self.agg = Aggregator(self.engine, Taxonomy.default(), clock=lambda: self.now,
                              running_job_cache_events=10**9, incremental=incremental)

    def store(self, events: list[dict[str, Any]]) -> None:
        from service.access.auth import Principal
        from service.store.events import store_rows
        from service.wire.batch import validate_batch

        admin = Principal(role="admin", token_id="bench")
        for k in range(0, len(events), 5000):
            valid = validate_batch(events[k:k + 5000], admin, now=datetime.now(UTC),
                                   max_future_s=10**9, max_age_s=10**9)
            with self.engine.begin() as conn:
                store_rows(conn.connection.driver_connection, valid.rows)

    def timed_pass(self, at: datetime) -> tuple[float, int]:
        self.now = at
        t0 = time.perf_counter()
        report = self.agg.run_pass()
        return time.perf_counter() - t0, report.jobs_recomputed

    def close(self) -> None:
        self.engine.dispose()
        gc.set_threshold(*self.thresholds)


def _step_after(job: str, start: float, t: float) -> dict[str, Any]:
    return _ev(job, t, "heartbeat", attrs={"step": int((t - start) // HEARTBEAT_S)})


def one_heartbeat(pg: Postgres, ages: tuple[float, ...], runs: int, incremental: bool,
                  now: datetime) -> dict[float, list[float]]:
    """Seconds of each pass that follows one new heartbeat of a job of each age, each job
    alone in its own database; the jobs' runs alternate (a loaded machine slows them
    alike), in turn first."""
    setups = []
    try:
        for days in ages:
            url = pg.create_database("bench_age")
            start = now.timestamp() - days * 86400
            copy_jobs(libpq_url(url), [("job-age", start)], now.timestamp())
            live = Live(url, now, incremental)
            setups.append((days, url, start, live))
            live.timed_pass(now)  # cold: loads and computes the whole job once
        out: dict[float, list[float]] = {days: [] for days in ages}
        t = now.timestamp()
        for k in range(runs):
            t += HEARTBEAT_S
            for days, _url, start, live in setups[::-1] if k % 2 else setups:
                live.store([_step_after("job-age", start, t)])
                seconds, jobs = live.timed_pass(datetime.fromtimestamp(t, UTC))
                assert jobs == 1, jobs
                out[days].append(seconds)
        return out
    finally:
        for _days, url, _start, live in setups:
            live.close()
            pg.drop_database(url)


def fleet_minute(pg: Postgres, jobs: int, max_days: float, runs: int,
                 now: datetime) -> tuple[int, dict[bool, list[float]], int]:
    """Seconds of the passes after each minute of live traffic from `jobs` jobs aged
    1..max_days days, incremental path off then on, in one database."""
    url = pg.create_database("bench_age_fleet")
    spans = [(f"job-{i:04d}", now.timestamp() - 86400 * (1 + (max_days - 1) * i
                                                         / max(1, jobs - 1)))
             for i in range(jobs)]
    n = copy_jobs(libpq_url(url), spans, now.timestamp())
    out: dict[bool, list[float]] = {}
    t = now.timestamp()
    live_events = 0
    try:
        # Off, a pass over more than 100 jobs takes minutes: measured on smaller fleets only.
        for incremental in (False, True) if jobs <= 100 else (True,):
            live = Live(url, datetime.fromtimestamp(t, UTC), incremental)
            try:
                live.timed_pass(datetime.fromtimestamp(t, UTC))  # warm
                out[incremental] = []
                # Off, every pass computes every running job from all its events: two do.
                for _ in range(runs if incremental else min(runs, 2)):
                    minute = [_step_after(job, start, t + s) for s in (20, 40, 60)
                              for job, start in spans]
                    live_events = len(minute)
                    t += 60
                    live.store(minute)
                    seconds, done = live.timed_pass(datetime.fromtimestamp(t, UTC))
                    assert done == jobs, (done, jobs)
                    out[incremental].append(seconds)
            finally:
                live.close()
    finally:
        pg.drop_database(url)
    return n, out, live_events


def run(pg: Postgres, quick: bool, scale: float | None = None,
        runs: int | None = None) -> dict[str, Any]:
    runs = runs or (3 if quick else 5)
    scale = scale if scale is not None else (0.005 if quick else 1.0)
    fleet_jobs = max(2, round(1000 * scale))
    old_days = 30.0 if not quick else 2.0
    now = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=30)
    per_job: dict[tuple[float, bool], list[float]] = {}
    for incremental in (False, True):
        timed = one_heartbeat(pg, (1.0, old_days), runs, incremental, now)
        for days in (1.0, old_days):
            per_job[(days, incremental)] = timed[days]
            print(f"  one heartbeat, job {days:g} d old, incremental={incremental}:"
                  f" {fmt(spread(timed[days], 4), ' s', 4)}", flush=True)
    n, minute, live_events = fleet_minute(pg, fleet_jobs, old_days, runs, now)
    off = fmt(spread(minute[False], 3), ' s', 3) if False in minute else "not run"
    print(f"  {fleet_jobs} jobs, {n} events, {live_events} live events a minute:"
          f" off {off}, on {fmt(spread(minute[True], 3), ' s', 3)}", flush=True)
    ratio = {inc: [o / y for o, y in zip(per_job[(old_days, inc)], per_job[(1.0, inc)],
                                         strict=True)] for inc in (False, True)}
    figures = {
        "events_per_hour": 3600 // HEARTBEAT_S + 3 * 3600 // SAVE_EVERY_S,
        "one_heartbeat_s": {f"{d:g}d_{'on' if inc else 'off'}": spread(v, 4)
                            for (d, inc), v in per_job.items()},
        "ratio_old_to_young": {("on" if inc else "off"): spread(v, 2)
                               for inc, v in ratio.items()},
        "fleet_jobs": fleet_jobs, "fleet_events": n, "live_events_per_minute": live_events,
        "fleet_minute_s": {("on" if inc else "off"): spread(v, 3)
                           for inc, v in minute.items()},
    }
    judged = not quick and scale >= 1
    on_ratio = spread(ratio[True], 2)
    on_minute = spread(minute[True], 3)
    return record(NAME, quick, figures, [
        (f"one heartbeat: job {old_days:g} d old <= 2x job 1 d old (incremental path)",
         f"{fmt(on_ratio, 'x', 2)} ({fmt(spread(per_job[(old_days, True)], 4), ' s', 4)} vs"
         f" {fmt(spread(per_job[(1.0, True)], 4), ' s', 4)})",
         on_ratio["median"] <= 2 if not quick else None),
        ("the same, incremental path off",
         f"{fmt(spread(ratio[False], 2), 'x', 2)}"
         f" ({fmt(spread(per_job[(old_days, False)], 4), ' s', 4)} vs"
         f" {fmt(spread(per_job[(1.0, False)], 4), ' s', 4)})", None),
        (f"pass after 1 minute of live traffic from {fleet_jobs} running jobs aged"
         f" 1-{old_days:g} d < 1 s (incremental path)",
         f"{fmt(on_minute, ' s', 3)} ({live_events} events, {n} stored)",
         on_minute["median"] < 1 if judged else None),
        ("the same, incremental path off", off, None),
    ])
