"""Target: `/v1/impact` for two cohorts of 10,000 jobs each well under a second (< 250 ms).

The paired benchmark's twelve runs are posted to a real `ett serve` and aggregated (the
real write path fills `job_impact`); their rows are then replicated with new job ids until
each cohort (`variant=baseline`, `variant=optimized`) holds 10,000 ended jobs, plus 1% of
running ones, so the read sums as many rows as a 10,000-job cohort would, without
aggregating 20,000 jobs' events on a 2-core machine.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import httpx
from sqlalchemy import text

from .common import ADMIN_TOKEN, Postgres, ett_serve, fmt, record, spread, time_get

NAME = "impact"


def _replicate(url: str, per_cohort: int) -> int:
    """Copy each stored job until every (model, variant) pair reaches per_cohort / 6 jobs."""
    from service.store.engine import make_engine

    engine = make_engine(url, pool_size=1, statement_timeout_ms=0)
    copies = per_cohort // 6 - 1
    with engine.begin() as conn:
        columns = [r[0] for r in conn.execute(text(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_name = 'job_impact' ORDER BY ordinal_position"))]
        rest = ", ".join(c for c in columns if c not in ("job_id", "first_at", "running"))
        conn.execute(text(
            f"INSERT INTO job_impact (job_id, first_at, running, {rest})"
            f" SELECT job_id || '.r' || g, first_at + g * interval '1 minute',"
            f" g % 100 = 0, {rest} FROM job_impact, generate_series(1, :n) AS g"),
            {"n": copies})
        conn.execute(text("ANALYZE job_impact"))
        rows = conn.execute(text("SELECT count(*) FROM job_impact")).scalar_one()
    engine.dispose()
    return rows


def run(pg: Postgres, quick: bool) -> dict[str, Any]:
    from service.demo import paired

    per_cohort = 1_000 if quick else 10_000
    url = pg.create_database("bench_impact")
    runs = 7
    with ett_serve(url) as srv, httpx.Client(
            base_url=srv.url, timeout=60,
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) as client:
        events = [e for run in paired.paired_events(paired.ANCHOR) for e in run]
        client.post("/v1/events", json={"events": events}).raise_for_status()
        client.post("/v1/aggregate").raise_for_status()
        rows = _replicate(url, per_cohort)
        params = {"baseline_start": "2026-10-01T00:00:00Z",
                  "baseline_end": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
                  "model": "paired_*", "baseline_label": "variant:baseline",
                  "candidate_label": "variant:optimized"}
        timings, _size = time_get(client, "/v1/impact", runs, params)
        doc = client.get("/v1/impact", params=params).json()
        whatif = {k: v for k, v in params.items() if not k.startswith(("baseline", "candidate"))}
        w0 = time.perf_counter()
        client.get("/v1/whatif", params={**whatif, "start": params["baseline_start"],
                                         "component": "compilation",
                                         "reduction": 0.5}).raise_for_status()
        whatif_ms = (time.perf_counter() - w0) * 1000
    pg.drop_database(url)
    jobs = (doc["baseline"]["jobs"], doc["candidate"]["jobs"])
    running = doc["baseline"]["running_excluded"] + doc["candidate"]["running_excluded"]
    s = spread(timings, 1)
    figures = {"job_impact_rows": rows, "cohort_jobs": list(jobs), "running_excluded": running,
               "impact_ms": s, "whatif_ms": round(whatif_ms, 1)}
    print(f"job_impact rows: {rows}; cohorts {jobs[0]} and {jobs[1]} ended jobs"
          f" ({running} running left out); /v1/impact {fmt(s, ' ms')};"
          f" /v1/whatif {whatif_ms:.1f} ms")
    return record(NAME, quick, figures, [
        (f"/v1/impact, two cohorts of {per_cohort:,} jobs < 250 ms", fmt(s, " ms"),
         s["median"] < 250 if not quick else None),
    ])
