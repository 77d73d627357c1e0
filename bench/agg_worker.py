"""One aggregation measurement in a fresh process, so its peak RSS is its own.

    python -m bench.agg_worker full URL NOW_ISO [WORKERS]
    python -m bench.agg_worker scan URL
    python -m bench.agg_worker incremental URL NOW_ISO LIVE_JSON_FILE

Prints one JSON line: seconds, peak RSS and counts.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from datetime import UTC, datetime, timedelta

import orjson


def peak_rss_mb() -> float:
    """The largest resident set of this process or of any worker process it waited for."""
    return max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
               resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024


def main() -> None:
    import psycopg
    from sqlalchemy.engine import make_url

    from service.aggregate import build_aggregator  # noqa: F401
    from service.store.engine import make_engine
    from service.taxonomy import load_taxonomy  # noqa: F401  (import cost outside the clock)

    mode, url = sys.argv[1], sys.argv[2]
    out: dict[str, object] = {"rss_before_mb": round(peak_rss_mb(), 1)}
    if mode == "scan":
        dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(dsn) as conn, conn.cursor(name="scan") as cur:
            cur.itersize = 10_000
            t0 = time.perf_counter()
            cur.execute(
                "SELECT event_id::text, (extract(epoch FROM ts) * 1000000)::bigint, job_id,"
                " attempt, model, type, phase, gpus, team, rank, attrs"
                " FROM events ORDER BY job_id, ts"
            )
            n = sum(1 for _ in cur)
            out.update(seconds=time.perf_counter() - t0, rows=n)
    else:
        from ett_core import Taxonomy
        from service.aggregate import Aggregator

        now = datetime.fromisoformat(sys.argv[3])
        engine = make_engine(url, pool_size=2, statement_timeout_ms=0)
        agg = Aggregator(engine, Taxonomy.default(), clock=lambda: now)
        if mode == "full":
            workers = int(sys.argv[4]) if len(sys.argv) > 4 else 1
            t0 = time.perf_counter()
            if workers > 1:
                from service.aggregation.recompute import recompute_all
                from service.settings import Settings

                report = recompute_all(url, Settings(database_url=url), workers, now=now)
            else:
                report = agg.run_pass(recompute_all=True)
            out.update(seconds=time.perf_counter() - t0, jobs=report.jobs_recomputed,
                       failed=report.jobs_failed, workers=workers)
        else:
            from service.access.auth import Principal
            from service.store.events import store_rows
            from service.wire.batch import validate_batch

            with open(sys.argv[4]) as fh:
                minutes = json.load(fh)
            # The pass a running service made at `now`: it leaves the running jobs' events
            # and rows cached, as every later pass of a long-lived aggregator finds them.
            agg.run_pass()
            timings, jobs = [], []
            admin = Principal(role="admin", token_id="bench")
            for k, batch in enumerate(minutes, start=1):
                t_now = now + timedelta(minutes=k)
                valid = validate_batch(batch, admin, now=datetime.now(UTC), max_future_s=3600,
                                       max_age_s=400 * 86400)
                with engine.begin() as conn:
                    store_rows(conn.connection.driver_connection, valid.rows)
                agg.clock = lambda t_now=t_now: t_now
                t0 = time.perf_counter()
                report = agg.run_pass()
                timings.append(time.perf_counter() - t0)
                jobs.append(report.jobs_recomputed)
            out.update(seconds_each=timings, jobs_each=jobs, cache=agg.cache_stats())
        engine.dispose()
    out["peak_rss_mb"] = round(peak_rss_mb(), 1)
    sys.stdout.write(orjson.dumps(out).decode() + "\n")


if __name__ == "__main__":
    main()
