"""Issue 29: the paper's fleet, run rather than extrapolated. 500 models x 180 days of the
simulated fleet (restarts, failures, checkpoints, cohort labels on allocations), COPYed
into the partitioned `events` (bench/fleet.py), then, in one run on one database:

* bytes per stored event (heap and the key, the table's only index; TOAST included);
* a full recompute (`ett aggregate --recompute-all`, one process per CPU up to 4) against
  a plain SQL scan of the same events in job/time order, each in a fresh process
  (bench.agg_worker), peak RSS of the recompute (its worker processes included);
* the reads on the whole history through a real `ett serve`: `/v1/ett` 28 days by model,
  `/metrics`, every console page, `/v1/impact` (two label cohorts of the last 28 days, each
  of at least 10,000 jobs at full size), checkpoint advice for every model;
* retention: `ett prune` with the horizon on the first month boundary of the history
  (the oldest month's partition goes) against today's delete (the same jobs' events and
  results deleted row by row, rolled back so both run on the same data), and the dead
  rows each leaves.

`--scale S` runs S of the 180 days (same 500 models) for development; the full size is
hours on a 2-core machine. The recompute and the scan run once each at full size; `--runs N`
measures N pairs, each on its own copy of the loaded database (`CREATE DATABASE ...
TEMPLATE`), so that every recompute is a first one. Reads are medians of several requests.
"""

from __future__ import annotations

import contextlib
import os
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import text

from . import fleet
from .common import (
    ADMIN_TOKEN,
    Postgres,
    console_pages,
    ett_serve,
    fmt,
    libpq_url,
    most_attempts,
    record,
    run_json,
    signed_in_browser,
    spread,
    time_calls,
    time_get,
    time_page,
    wait_for_metrics_snapshot,
)

NAME = "fleet_180d"
MODELS, DAYS = 500, 180
READ_RUNS = 7


def _say(message: str) -> None:
    print(f"  [{datetime.now(UTC):%H:%M:%S}] {message}", flush=True)


def _disk(engine: Any, events: int) -> dict[str, Any]:
    with engine.connect() as conn:
        heap, index, total = conn.execute(text(
            "SELECT sum(pg_table_size(inhrelid)), sum(pg_indexes_size(inhrelid)),"
            " sum(pg_total_relation_size(inhrelid))"
            " FROM pg_inherits WHERE inhparent = 'events'::regclass")).one()
        derived = dict(conn.execute(text(
            "SELECT relname, pg_total_relation_size(oid) FROM pg_class"
            " WHERE relname IN ('segments', 'rollup_hourly', 'jobs', 'attempts', 'job_impact',"
            " 'checkpoint_attempts', 'fleet_hourly', 'fleet_daily', 'fleet_weekly',"
            " 'team_hourly', 'team_daily', 'model_hourly', 'model_daily', 'model_weekly',"
            " 'job_first_ts')"
            " AND relkind = 'r'")).all())
    per = lambda b: round(int(b) / max(events, 1), 1)  # noqa: E731
    return {"events_bytes": int(total), "bytes_per_event": per(total),
            "heap_bytes_per_event": per(heap), "index_bytes_per_event": per(index),
            "derived_bytes_per_event": {k: per(v) for k, v in sorted(derived.items())}}


def _reads(url: str, engine: Any, now: datetime) -> tuple[dict[str, Any], list[tuple]]:
    from service.results.checkpoint_advice import fleet_checkpoint_advice

    figures: dict[str, Any] = {}
    targets: list[tuple[str, dict[str, float], float]] = []
    start28 = (now - timedelta(days=28)).isoformat().replace("+00:00", "Z")
    with ett_serve(url, aggregator=True, env={"ETT_AGGREGATE_INTERVAL_S": "3600"}) as srv, \
            httpx.Client(base_url=srv.url, timeout=300,
                         headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) as client:
        wait_for_metrics_snapshot(client, 1800)
        ett = spread(time_get(client, "/v1/ett", READ_RUNS,
                              {"group_by": "model", "start": start28})[0], 1)
        targets.append(("/v1/ett, whole fleet, 28 d, group_by=model", ett, 200))
        met = spread(time_get(client, "/metrics", READ_RUNS)[0], 1)
        targets.append(("/metrics", met, 100))
        _say(f"/v1/ett 28 d by model {fmt(ett, ' ms')}; /metrics {fmt(met, ' ms')}")
        impact_params = {"baseline_start": start28,
                         "baseline_end": now.isoformat().replace("+00:00", "Z"),
                         "baseline_label": "variant:baseline",
                         "candidate_label": "variant:optimized"}
        imp = spread(time_get(client, "/v1/impact", READ_RUNS, impact_params)[0], 1)
        doc = client.get("/v1/impact", params=impact_params).json()
        cohorts = (doc["baseline"]["jobs"], doc["candidate"]["jobs"])
        figures["impact_cohort_jobs"] = list(cohorts)
        targets.append((f"/v1/impact, two cohorts of {cohorts[0]:,} and {cohorts[1]:,} jobs",
                        imp, 1000))
        _say(f"/v1/impact ({cohorts} jobs) {fmt(imp, ' ms')}")
        listing = client.get("/v1/models").json()["models"]
        model, team = listing[0]["model"], listing[0]["team"]
        pages = console_pages(model, team, most_attempts(url))
        with signed_in_browser(srv.url, 300) as browser:
            for label, path in pages.items():
                ms, _size = time_page(browser, path, READ_RUNS)
                s = spread(ms, 1)
                targets.append((f"console page {label}", s, 300))
                _say(f"console {label} {fmt(s, ' ms')}")
    advice_start = now - timedelta(days=30)
    adv = spread(time_calls(lambda: fleet_checkpoint_advice(engine, advice_start, now),
                            READ_RUNS), 1)
    listed = fleet_checkpoint_advice(engine, advice_start, now)
    targets.append((f"checkpoint advice, every model ({len(listed)}), 30 d", adv, 1000))
    _say(f"checkpoint advice for {len(listed)} models {fmt(adv, ' ms')}")
    figures.update({label: s for label, s, _bound in targets})
    return figures, [(f"{label} < {bound:g} ms", fmt(s, " ms"), s["median"] < bound)
                     for label, s, bound in targets]


def _dead_rows(engine: Any) -> dict[str, int]:
    # A backend reports its counters when idle for a while or when it exits: the pool's
    # connections (which ran the deletes) are closed first, so their counts are in.
    engine.dispose()
    time.sleep(1)
    with engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT CASE WHEN relname LIKE 'events%' THEN 'events' ELSE relname END,"
            " sum(n_dead_tup) FROM pg_stat_user_tables"
            " WHERE relname LIKE 'events%' OR relname IN"
            " ('segments', 'rollup_hourly', 'attempts', 'jobs') GROUP BY 1")).all()
    return {name: int(n) for name, n in rows}


def _todays_delete(engine: Any, cutoff: datetime) -> tuple[float, float, int]:
    """`ett prune` as it was (every event of the pruned jobs deleted by job, then their
    results), in one transaction rolled back: (events s, results s, events deleted)."""
    events_s = results_s = 0.0
    deleted = 0
    with engine.connect() as conn:
        tx = conn.begin()
        ids = [r[0] for r in conn.execute(text(
            "SELECT job_id FROM jobs WHERE NOT open AND last_at < :c ORDER BY job_id"),
            {"c": cutoff})]
        for at in range(0, len(ids), 500):
            params = {"ids": ids[at:at + 500]}
            t0 = time.perf_counter()
            deleted += conn.execute(text("DELETE FROM events WHERE job_id = ANY(:ids)"),
                                    params).rowcount
            t1 = time.perf_counter()
            for table in ("segments", "rollup_hourly", "attempts", "dirty_jobs", "jobs"):
                conn.execute(text(f"DELETE FROM {table} WHERE job_id = ANY(:ids)"), params)
            events_s += t1 - t0
            results_s += time.perf_counter() - t1
        tx.rollback()
    return events_s, results_s, deleted


def _partitions_before(engine: Any, cutoff: datetime) -> tuple[int, int, str]:
    """How many event partitions there are, the bytes (tables and indexes) of those a prune
    to `cutoff` drops, and the server's data directory."""
    from service.store import retention

    with engine.connect() as conn:
        names = retention.partitions(conn)
        doomed = [name for name in names
                  if (month := retention.partition_month(name)) is not None
                  and retention.next_month(month) <= cutoff]
        size = sum(conn.execute(text("SELECT pg_total_relation_size(to_regclass(:p))"),
                                {"p": name}).scalar_one() for name in doomed)
        return len(names), size, conn.execute(text("SHOW data_directory")).scalar_one()


def _unlink_seconds(directory: str, size: int) -> float:
    """Seconds to remove files of `size` bytes in all, written and synced in `directory`
    beforehand: what dropping a partition of that size costs the file system at commit,
    whatever PostgreSQL does (on this machine's ext4, ~0.7 s a GiB)."""
    segment, block = 2**30, b"\0" * 2**20
    paths = []
    try:
        for k in range(0, size, segment):
            path = os.path.join(directory, f"ett-bench-unlink-{k // segment}")
            paths.append(path)
            with open(path, "wb") as fh:
                for _ in range(min(segment, size - k) // len(block)):
                    fh.write(block)
                fh.flush()
                os.fsync(fh.fileno())
        began = time.perf_counter()
        for path in paths:
            os.unlink(path)
        return time.perf_counter() - began
    finally:
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def _kept_read_s(engine: Any, month: datetime, cutoff: datetime) -> tuple[float, int]:
    """Seconds to read the jobs a prune to `cutoff` keeps among those of `month`, and how
    many there are (the drop's first step, on its own)."""
    from service.store import retention

    with engine.connect() as conn:
        began = time.perf_counter()
        kept = retention.kept_jobs(conn, month, cutoff)
        return time.perf_counter() - began, len(kept)


def _vacuum_jobs_s(engine: Any) -> float:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        began = time.perf_counter()
        conn.execute(text("VACUUM jobs"))
        return time.perf_counter() - began


def _prune(url: str, engine: Any, start: datetime, now: datetime
           ) -> tuple[dict[str, Any], list[tuple]]:
    import logging

    from service.store import retention

    # The partition drop's steps, each timed, in the log.
    logging.getLogger("service.store.retention").setLevel(logging.INFO)
    cutoff = retention.next_month(retention.month_start(start))
    if cutoff >= now:
        _say("prune: the history holds no month boundary; skipped")
        return {"prune": "skipped: no month boundary in the history"}, []
    old_events_s, old_results_s, old_deleted = _todays_delete(engine, cutoff)
    # The prunable jobs are read from an index alone, which needs the visibility map: right
    # after a full recompute has rewritten every jobs row, no page is all-visible and each
    # settled job costs a page read. A service's settled jobs are rows autovacuum has long
    # since visited; VACUUM stands in for it, both reads timed.
    month = retention.month_start(start)
    kept_stale_s, kept_n = _kept_read_s(engine, month, cutoff)
    vacuum_s = _vacuum_jobs_s(engine)
    kept_vacuumed_s, _ = _kept_read_s(engine, month, cutoff)
    _say(f"kept jobs ({kept_n}) read in {kept_stale_s:.3f} s after the recompute,"
         f" {kept_vacuumed_s:.3f} s after VACUUM jobs ({vacuum_s:.1f} s)")
    # A rolled-back delete leaves no dead rows; what was dead before is subtracted (no
    # VACUUM of the whole history in between: at full size it would take longer than both).
    before = _dead_rows(engine)
    parts_before, doomed_bytes, data_dir = _partitions_before(engine, cutoff)
    t0 = time.perf_counter()
    dropped = retention.drop_old_partitions(engine, cutoff)
    t1 = time.perf_counter()
    jobs, deleted = retention.prune_jobs(engine, cutoff)
    t2 = time.perf_counter()
    dead = {k: max(0, v - before.get(k, 0)) for k, v in _dead_rows(engine).items()}
    with engine.connect() as conn:
        parts_after = len(retention.partitions(conn))
        moved = conn.execute(text("SELECT count(*) FROM events_default")).scalar_one()
    new_events_s, new_results_s = t1 - t0, t2 - t1
    # Next to the data directory (same file system), where the benchmark runs the server.
    beside = os.path.dirname(data_dir)
    floor_s = (_unlink_seconds(beside, doomed_bytes) if os.access(beside, os.W_OK)
               else float("nan"))
    figures = {"prune_cutoff": cutoff.isoformat(), "prune_jobs": jobs,
               "prune_events": dropped + deleted, "prune_events_by_partition": dropped,
               "prune_events_by_row": deleted, "prune_kept_events_moved": moved,
               "prune_partitions": [parts_before, parts_after],
               "prune_partition_s": round(new_events_s, 3),
               "prune_results_rows_s": round(new_results_s, 3),
               "todays_delete_events_s": round(old_events_s, 3),
               "todays_delete_results_s": round(old_results_s, 3),
               "todays_delete_events": old_deleted, "dead_rows_after_prune": dead,
               "dropped_partition_bytes": doomed_bytes, "unlink_same_bytes_s": round(floor_s, 3),
               "kept_jobs": kept_n, "kept_read_after_recompute_s": round(kept_stale_s, 3),
               "kept_read_after_vacuum_s": round(kept_vacuumed_s, 3),
               "vacuum_jobs_s": round(vacuum_s, 1)}
    _say(f"prune to {cutoff:%Y-%m-%d}: {dropped + deleted} events of {jobs} jobs;"
         f" partitions {new_events_s:.3f} s (+ {new_results_s:.3f} s job detail) against"
         f" today's delete {old_events_s:.3f} s (+ {old_results_s:.3f} s); dead rows {dead}")
    size = f"{dropped + deleted:,} events, {parts_before} -> {parts_after} partitions"
    return figures, [
        (f"prune the oldest month ({size}): events gone < 1 s",
         f"{new_events_s:.3f} s by dropping partitions vs {old_events_s:.3f} s today's"
         f" delete, same run ({old_deleted:,} events)", new_events_s < 1),
        ("the kept jobs read alone (the drop's first step), right after the full recompute"
         " rewrote every jobs row, and after VACUUM jobs (as autovacuum leaves settled jobs;"
         " the drop above runs after it)",
         f"{kept_stale_s:.3f} s and {kept_vacuumed_s:.3f} s ({kept_n:,} kept jobs;"
         f" VACUUM {vacuum_s:.1f} s)", None),
        ("the file system's part: removing files as large as the dropped partitions"
         " (1 GiB segments, as PostgreSQL keeps them) in the same directory",
         f"{floor_s:.3f} s for {doomed_bytes / 2**30:.2f} GiB", None),
        ("prune leaves no dead rows in events",
         f"{dead.get('events', 0)} dead event rows ({moved:,} kept jobs' events moved)",
         dead.get("events", 0) == 0),
        ("prune: the pruned jobs' results (segments, rollups, attempts, jobs), row by row",
         f"{new_results_s:.3f} s vs {old_results_s:.3f} s; dead rows "
         + ", ".join(f"{k} {v}" for k, v in sorted(dead.items()) if k != "events"), None),
    ]


def run(pg: Postgres, quick: bool, scale: float | None = None,
        runs: int | None = None) -> dict[str, Any]:
    from service.store.engine import make_engine

    scale = scale or (0.01 if quick else 1.0)
    models = 20 if quick else MODELS
    days = DAYS * scale
    runs = runs or 1
    from service.store import retention

    url = pg.create_database("bench_f180")
    now = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=10)
    start = now - timedelta(days=days)
    engine = make_engine(url, pool_size=2, statement_timeout_ms=0)
    # The months of the history, as the aggregator would have created them month by month.
    retention.ensure_partitions(engine, start, months_ahead=round(days / 28) + 1)
    t0 = time.perf_counter()
    n_events, _ = fleet.generate(libpq_url(url), models, days, now, labels=True)
    load_s = time.perf_counter() - t0
    _say(f"fleet: {models} models x {days:g} days = {n_events} events,"
         f" generated and COPYed in {load_s:.0f} s")
    disk = _disk(engine, n_events)
    _say(f"events: {disk['bytes_per_event']} bytes per stored event"
         f" (heap {disk['heap_bytes_per_event']}, key {disk['index_bytes_per_event']})")
    workers = min(4, os.cpu_count() or 1)
    scans, fulls, rss, jobs = [], [], [], 0
    loaded = url
    for k in range(runs):
        # Each pair of a repeated measurement runs on its own copy of the loaded database
        # (made once its predecessor is dropped): every recompute is a first one, as the target
        # means, over results that nothing wrote before. One pair runs on it directly.
        if runs > 1:
            engine.dispose()
            if k:
                pg.drop_database(url)
            url = pg.create_database("bench_f180_run", template=loaded)
            engine = make_engine(url, pool_size=2, statement_timeout_ms=0)
        s = run_json(["bench.agg_worker", "scan", url])
        _say(f"scan {s['seconds']:.1f} s ({s['rows']} rows)")
        f = run_json(["bench.agg_worker", "full", url, now.isoformat(), str(workers)])
        _say(f"full recompute {f['seconds']:.1f} s with {workers} processes ({f['jobs']} jobs,"
             f" {f['failed']} failed), peak RSS {f['peak_rss_mb']:.0f} MB;"
             f" {f['seconds'] / s['seconds']:.2f}x")
        scans.append(s["seconds"])
        fulls.append(f["seconds"])
        rss.append(f["peak_rss_mb"])
        jobs = f["jobs"]
    if runs > 1:
        pg.drop_database(loaded)
    with engine.begin() as conn:  # what ingest's claims would have left (COPY skips them)
        conn.execute(text("INSERT INTO job_owners SELECT job_id, model, team FROM jobs"
                          " ON CONFLICT DO NOTHING"))
        conn.execute(text("ANALYZE"))
    derived = _disk(engine, n_events)["derived_bytes_per_event"]
    ratio = spread([f / s for f, s in zip(fulls, scans, strict=True)], 2)
    full_s, scan_s = spread(fulls, 1), spread(scans, 1)
    figures: dict[str, Any] = {
        "scale": scale, "models": models, "days": days, "events": n_events, "jobs": jobs,
        "load_s": round(load_s, 1), **disk, "derived_bytes_per_event": derived,
        "scan_s": scan_s, "full_recompute_s": full_s, "ratio_full_to_scan": ratio,
        "workers": workers, "peak_rss_mb": max(rss)}
    size = f"{models} models x {days:g} d, {n_events:,} events, {jobs:,} jobs"
    targets: list[tuple[str, str, bool | None]] = [
        (f"run at size: {size}", f"generated and COPYed in {load_s:.0f} s", None),
        ("bytes per stored event (heap + key, the only index)",
         f"{disk['bytes_per_event']} ({disk['heap_bytes_per_event']} heap,"
         f" {disk['index_bytes_per_event']} key); derived tables "
         + ", ".join(f"{k} {v}" for k, v in derived.items()), None),
        (f"full recompute <= 2x plain scan in job/time order ({workers} processes,"
         f" {len(fulls)} run{'s' if len(fulls) > 1 else ''})",
         f"{fmt(ratio, 'x', 2)} (full {fmt(full_s, ' s')}, scan {fmt(scan_s, ' s')})",
         ratio["median"] <= 2 if not quick else None),
        ("peak RSS of the full recompute (worker processes included)",
         f"{max(rss):.0f} MB", None),
    ]
    read_figures, read_targets = _reads(url, engine, now)
    figures.update(read_figures)
    targets += [(t, m, ok if not quick else None) for t, m, ok in read_targets]
    prune_figures, prune_targets = _prune(url, engine, start, now)
    figures.update(prune_figures)
    targets += [(t, m, ok if not quick else None) for t, m, ok in prune_targets]
    engine.dispose()
    pg.drop_database(url)
    return record(NAME, quick, figures, targets)
