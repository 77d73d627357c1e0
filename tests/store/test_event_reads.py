"""Every read of `events` is by job and runs on the key, the table's only index, in every
partition (docs/operations.md, "Partitioning"): checked with EXPLAIN on the statements the
code sends, so a read that needs another index, or an index no read uses, shows here."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
from sqlalchemy import text

from service.store import events, impact, results
from service.store.retention import ensure_partitions
from tests.factories import post_all, spec_example
from tests.store.test_citus_readiness import statements

# (the statement as the code sends it, its parameters, psycopg's %(name)s style or not)
IDS = ["job-a", "job-b"]
READS: dict[str, tuple[str, dict[str, Any], bool]] = {
    "a pass's events (store.results._LOAD_EVENTS)":
        (results._LOAD_EVENTS, {"ids": IDS}, True),
    "a pass's labels (store.impact._LOAD_LABELS)":
        (impact._LOAD_LABELS, {"ids": IDS}, False),
    "a job's marks (store.queries.job_marks)":
        (statements("service.store.queries:job_marks")[0], {"j": "job-a"}, False),
    "whether a job has events (store.queries.job_has_events)":
        (statements("service.store.queries:job_has_events")[0], {"j": "job-a"}, False),
    "a recompute's job page (store.results.job_ids_after)":
        (results._JOBS_AFTER, {"after": "", "n": 1000}, False),
    "ingest's probe for a stored copy (store.events.INSERT_SQL)":
        (events.INSERT_SQL, {"rows": orjson.dumps([[
            "00000000-0000-4000-8000-000000000001", "2026-01-05T00:00:00Z", "job-a", 0, "m",
            "heartbeat", None, None, None, None, None, None]]).decode()}, True),
}


def _plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    out = [plan]
    for child in plan.get("Plans", []):
        out += _plan_nodes(child)
    return out


def _explain(db_engine, sql: str, params: dict[str, Any], pyformat: bool) -> list[dict]:
    with db_engine.connect() as conn:
        # Forbid what an index could replace: a read that still scans has no index to use.
        conn.exec_driver_sql("SET enable_seqscan = off")
        conn.exec_driver_sql("SET enable_bitmapscan = off")
        if pyformat:
            with conn.connection.driver_connection.cursor() as cur:
                cur.execute("EXPLAIN (FORMAT JSON) " + sql, params)
                plan = cur.fetchone()[0]
        else:
            plan = conn.execute(text("EXPLAIN (FORMAT JSON) " + sql), params).scalar_one()
        conn.rollback()
    return _plan_nodes(plan[0]["Plan"])


def test_events_has_one_index_its_key(db_engine) -> None:
    with db_engine.connect() as conn:
        indexes = conn.execute(text(
            "SELECT indexrelid::regclass::text FROM pg_index"
            " WHERE indrelid = 'events'::regclass")).scalars().all()
    assert indexes == ["pk_events"]


def test_every_read_of_events_is_an_index_scan_on_the_key_in_every_partition(
        db_engine) -> None:
    ensure_partitions(db_engine, datetime(2026, 1, 1, tzinfo=UTC))
    with db_engine.connect() as conn:
        parts = conn.execute(text(
            "SELECT count(*) FROM pg_inherits WHERE inhparent = 'events'::regclass"
        )).scalar_one()
    wrong = {}
    for name, (sql, params, pyformat) in READS.items():
        nodes = _explain(db_engine, sql, params, pyformat)
        on_events = [n for n in nodes if n.get("Relation Name", "").startswith("events")
                     and n["Node Type"] != "ModifyTable"]  # the insert's target
        bad = [(n["Node Type"], n["Relation Name"], n.get("Index Name")) for n in on_events
               if n["Node Type"] not in ("Index Scan", "Index Only Scan")
               or not n["Index Name"].endswith("_pkey")]
        # Time order comes from the key, not from a sort of a job's events.
        sorts = [n for n in nodes if n["Node Type"] == "Sort"
                 and any("ts" in k for k in n.get("Sort Key", []))]
        if bad or sorts or not on_events:
            wrong[name] = (bad, len(sorts), len(on_events))
        # Partitions no read can exclude are each probed: a by-job read costs one probe
        # per partition, which is why partitions are months (store/retention.py).
        assert len({n["Relation Name"] for n in on_events}) <= parts
    assert wrong == {}


def test_a_pass_reads_its_chunks_events_merged_from_the_key_with_no_sort(
        api, agg, monkeypatch) -> None:
    # The planner overestimates a chunk's rows and would pick bitmap scans and a sort that
    # spills to disk. Each read a real pass sends is explained on the pass's own
    # connection, in its chunk's transaction, just before it runs: with the settings the
    # pass gives it, whatever they are.
    post_all(api, [*spec_example("job-a"), *spec_example("job-b", model="model-b")])
    plans: list[list[dict[str, Any]]] = []
    read = results._events_by_job

    def explained(conn, statement, params, page=None):
        with conn.connection.driver_connection.cursor() as cur:
            cur.execute("EXPLAIN (FORMAT JSON) " + statement, params)
            plans.append(_plan_nodes(cur.fetchone()[0][0]["Plan"]))
        return read(conn, statement, params, page)

    monkeypatch.setattr(results, "_events_by_job", explained)
    assert agg.run_pass(recompute_all=True).jobs_recomputed == 2
    assert plans
    for nodes in plans:
        assert "Sort" not in {n["Node Type"] for n in nodes}
        assert {n["Node Type"] for n in nodes
                if n.get("Relation Name", "").startswith("events")} == {"Index Scan"}
    with agg.engine.connect() as conn:  # a chunk's setting does not outlive its transaction
        assert conn.exec_driver_sql("SHOW enable_sort").scalar_one() == "on"
