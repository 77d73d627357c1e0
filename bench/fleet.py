"""A simulated fleet straight into `events` by COPY (service.demo.fleet's generator, the
same shape `ett demo` posts), split over worker processes by model.

Events up to `cutoff` are copied; the ones in (cutoff, cutoff + live_s] are returned as
"live traffic" for incremental passes; later ones (the future of running jobs) are dropped.
"""

from __future__ import annotations

import multiprocessing as mp
import zlib
from datetime import datetime, timedelta
from typing import Any

import orjson

from service.demo.fleet import FleetSpec, ModelSimulator, fleet_models

from .loadgen import COPY_COLUMNS, _copy_field

CHUNK_ROWS = 50_000


def labelled(ev: dict[str, Any]) -> dict[str, Any]:
    """The event with cohort labels on its allocation (half the jobs `variant=baseline`,
    half `variant=optimized`, by job id), as a team comparing a change would send."""
    if ev.get("type") != "allocated":
        return ev
    k = zlib.crc32(ev["job_id"].encode())
    labels = {"variant": ("baseline", "optimized")[k % 2], "cluster": f"c{k % 3}"}
    return {**ev, "attrs": {**(ev.get("attrs") or {}), "labels": labels}}


def _worker(args: tuple[str, int, int, int, float, float, float, bool]
            ) -> tuple[int, list[Any]]:
    import psycopg

    dsn, models, worker, workers, start_ts, cutoff_ts, live_s, labels = args
    spec = FleetSpec(models=models)
    copied, live, lines = 0, [], []
    sql = f"COPY events ({', '.join(COPY_COLUMNS)}) FROM STDIN"
    with psycopg.connect(dsn) as conn:

        def flush() -> None:
            with conn.transaction(), conn.cursor() as cur, cur.copy(sql) as copy:
                copy.write(("\n".join(lines) + "\n").encode())
            lines.clear()

        for i, model in enumerate(fleet_models(spec)):
            if i % workers != worker:
                continue
            sim = ModelSimulator(model, spec, start_ts + i * 37.0)
            while sim.t <= cutoff_ts + live_s:
                for t, ev in sim.next_job():
                    if t <= cutoff_ts:
                        ev = labelled(ev) if labels else ev
                        lines.append("\t".join(_copy_field(ev.get(c)) for c in COPY_COLUMNS))
                        copied += 1
                        if len(lines) >= CHUNK_ROWS:
                            flush()
                    elif t <= cutoff_ts + live_s:
                        live.append((t, ev))
        if lines:
            flush()
    return copied, live


def generate(dsn: str, models: int, days: float, cutoff: datetime, live_s: float = 0.0,
             workers: int = 2, labels: bool = False) -> tuple[int, list[dict[str, Any]]]:
    """COPY `days` of a `models`-model fleet ending at `cutoff`; return (count, live events).
    With `labels`, allocations carry cohort labels (`labelled`)."""
    start = (cutoff - timedelta(days=days)).timestamp()
    jobs = [(dsn, models, w, workers, start, cutoff.timestamp(), live_s, labels)
            for w in range(workers)]
    with mp.get_context("spawn").Pool(workers) as pool:
        parts = pool.map(_worker, jobs)
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE events")
    live = sorted((x for _, part in parts for x in part), key=lambda x: x[0])
    return sum(n for n, _ in parts), [orjson.loads(orjson.dumps(ev)) for _, ev in live]
