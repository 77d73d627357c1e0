"""The ingest window: what one writer request can cost the aggregator.

Before the window, two events per job (allocated 399 days ago, released now) made 9,600
segment and 9,600 hourly rollup rows each: 150 such jobs in one 61 KB request made a 22.5 s
aggregation pass. Now a writer's events older than `ETT_INGEST_MAX_AGE` (7 days) are
rejected, so the worst a writer can send is a job spanning the window. Measured, on a real
`ett serve --no-aggregator` and an in-process aggregator pass over a fresh database each:

* `writer_window`: a writer's worst request: 150 jobs allocated 7 days minus a minute ago,
  released now;
* `writer_old`: the request of the defect from a writer (399 days): how many events the
  window rejects;
* `admin_backfill_old`: the same request from an admin token (the backfill path, what
  every writer could send before): its pass, for comparison.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson
from sqlalchemy import create_engine, text

from .common import ADMIN_TOKEN, Postgres, ett_serve, record, writer_token

NAME = "ingest_window"


def _request(jobs: int, age: timedelta, now: datetime) -> list[dict[str, Any]]:
    def ev(job: str, ts: datetime, etype: str, **extra: Any) -> dict[str, Any]:
        return {"event_id": str(uuid.uuid4()), "ts": ts.isoformat(), "job_id": job,
                "attempt": 0, "model": "ads_x", "type": etype, **extra}

    out = []
    for i in range(jobs):
        job = f"w-{i}"
        out += [ev(job, now - age, "allocated", gpus=8), ev(job, now, "released")]
    return out


def _pass(url: str) -> dict[str, Any]:
    from service.aggregate import build_aggregator
    from service.settings import Settings

    engine = create_engine(url)
    try:
        agg = build_aggregator(Settings(database_url=url), engine)
        t0 = time.perf_counter()
        report = agg.run_pass()
        seconds = time.perf_counter() - t0
        with engine.connect() as conn:
            rows = {t: conn.execute(text(f"SELECT count(*) FROM {t}")).scalar_one()
                    for t in ("segments", "rollup_hourly")}
            size = conn.execute(text("SELECT pg_database_size(current_database())")).scalar_one()
    finally:
        engine.dispose()
    return {"pass_s": round(seconds, 2), "jobs": report.jobs_recomputed, **rows,
            "database_mb": round(size / 2**20, 1)}


def _case(pg: Postgres, name: str, token: str | None, jobs: int, age: timedelta
          ) -> dict[str, Any]:
    url = pg.create_database(f"bench_window_{name}")
    try:
        with ett_serve(url) as srv:
            secret = token or writer_token(url, "ads", ("ads_*",))
            now = datetime.now(UTC) - timedelta(seconds=5)
            body = orjson.dumps({"events": _request(jobs, age, now)})
            r = httpx.post(srv.url + "/v1/events", content=body, timeout=120,
                           headers={"Authorization": f"Bearer {secret}",
                                    "Content-Type": "application/json"})
            answer = r.json()
        out = {"request_kb": round(len(body) / 1024, 1), "accepted": answer["accepted"],
               "rejected": len(answer["rejected"]), **_pass(url)}
    finally:
        pg.drop_database(url)
    print(f"{name}: {jobs} jobs, {out['request_kb']} KB, accepted {out['accepted']},"
          f" rejected {out['rejected']}; pass {out['pass_s']} s, {out['segments']} segments,"
          f" {out['rollup_hourly']} rollup rows, database {out['database_mb']} MB")
    return out


def run(pg: Postgres, quick: bool) -> dict[str, Any]:
    jobs = 5 if quick else 150
    window = _case(pg, "writer_window", None, jobs, timedelta(days=7, minutes=-1))
    old = _case(pg, "writer_old", None, jobs, timedelta(days=399))
    backfill = _case(pg, "admin_backfill_old", ADMIN_TOKEN, jobs, timedelta(days=399))
    figures = {"jobs": jobs, "writer_window": window, "writer_old": old,
               "admin_backfill_old": backfill}
    per_job = window["segments"] / max(window["jobs"], 1)
    return record(NAME, quick, figures, [
        ("a writer's events older than the window are all rejected",
         f"{old['rejected']} of {2 * jobs} rejected", old["accepted"] == jobs),
        ("segments per job of a writer's worst request (at most 169 hours)",
         f"{per_job:.0f}", per_job <= 170),
        ("pass for a writer's worst request against the 399-day backfill (plain figure)",
         f"{window['pass_s']} s against {backfill['pass_s']} s", None),
    ])
