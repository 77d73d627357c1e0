"""What distributing the database with Citus needs from the schema and the hot paths
(docs/scale-out.md), checked here because Citus itself cannot be installed: a unique key
of a distributed table holds its distribution column (Citus enforces uniqueness one shard
at a time), and every hot-path statement on a distributed table filters by it (so it is
routed to one shard, or to one shard per job of a batch)."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap

from sqlalchemy import text

from service.store import tables

# Distributed by job, the events' shards co-located with the results computed from them.
DISTRIBUTED = {name: "job_id" for name in (
    "events", "job_owners", "jobs", "attempts", "segments", "rollup_hourly",
    "checkpoint_attempts", "job_impact", "job_first_ts")}
# Small, read everywhere, written rarely: a copy on every node.
REFERENCE = {"api_tokens", "annotations"}
# On the coordinator: the work queue (`FOR UPDATE SKIP LOCKED` works on single-shard
# queries only), the quarantine (read joined to the queue), the fleet sums (keyed by hour
# and labels, not by job) and the aggregator's own state.
LOCAL = {"dirty_jobs", "aggregation_quarantine", "fleet_hourly", "fleet_daily", "fleet_weekly",
         "team_hourly", "team_daily", "model_hourly", "model_daily", "model_weekly",
         "settled_totals", "team_pending", "aggregator_state"}

# The statements run per request or per job of a pass, by where they live: a module
# constant holding SQL ("module:NAME") or a function whose SQL literals all count
# ("module:function").
HOT_PATHS = {
    "ingest: claim the batch's jobs": ["service.store.events:CLAIM_SQL"],
    "ingest: store a batch, skipping what is stored": ["service.store.events:INSERT_SQL"],
    "ingest: COPY a batch": ["service.store.events:COPY_SQL"],
    "aggregate: a chunk's events": ["service.store.results:_LOAD_EVENTS"],
    "aggregate: a chunk's labels": ["service.store.impact:_LOAD_LABELS"],
    "aggregate: replace a chunk's rows": [
        "service.store.results:_DELETE_ROLLUP", "service.store.results:delete_job_rows",
        "service.store.results:update_jobs", "service.store.result_rows:_FILL",
        "service.store.impact:replace_job_impact",
        "service.store.result_rows:replace_checkpoint_facts",
        "service.store.retention:_NOTE_FIRST_TS"],
    "read: one job": [
        "service.store.queries:job_result", "service.store.queries:job_has_events",
        "service.store.queries:job_segments", "service.store.queries:job_marks",
        "service.store.impact:job_labels"],
}

_TABLE_REF = re.compile(r"\b(FROM|JOIN|INTO|UPDATE|COPY)\s+(\w+)", re.IGNORECASE)
_FILTER = re.compile(r"\bjob_id\s*(=|IN\b)", re.IGNORECASE)
_COLUMN_LIST = r"\s+(?:AS\s+\w+\s+)?\(([^)]*)\)"


def _literal(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "?" for v in node.values)
    return None


def statements(where: str) -> list[str]:
    """The SQL that `module:NAME` holds (a constant) or that a function's literals hold."""
    module_name, name = where.split(":")
    obj = getattr(importlib.import_module(module_name), name)
    if isinstance(obj, str):
        return [obj]
    tree = ast.parse(textwrap.dedent(inspect.getsource(obj)))
    parts = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)
             for v in node.values}  # an f-string's pieces are not statements of their own
    literals = [s for node in ast.walk(tree)
                if id(node) not in parts and (s := _literal(node)) is not None]
    # `f"DELETE FROM {table} ..."` in a loop over table names: one statement per name.
    named = [s for s in literals if s in DISTRIBUTED]
    expanded = [s.replace(f"{verb} ?", f"{verb} {name}", 1) for s in literals
                for verb in ("FROM", "INTO") if f"{verb} ?" in s for name in named]
    return [s for s in literals + expanded if _TABLE_REF.search(s)]


def unrouted(sql: str) -> list[str]:
    """The distributed tables `sql` touches without naming their distribution column: a
    read or delete without a filter on it, an insert or COPY without it among the columns."""
    missing = []
    for verb, table in _TABLE_REF.findall(sql):
        column = DISTRIBUTED.get(table)
        if column is None:
            continue
        if verb.upper() in ("INTO", "COPY"):
            listed = re.search(rf"\b{verb}\s+{table}{_COLUMN_LIST}", sql, re.IGNORECASE)
            # A list built at run time ("?") is checked by the key: the column is in
            # the table's primary key, so no row can be inserted without it.
            if listed is None or not {column, "?"} & set(re.split(r"[\s,]+", listed.group(1))):
                missing.append(f"{verb} {table}")
        elif not _FILTER.search(sql):
            missing.append(f"{verb} {table}")
    return missing


def test_every_table_is_placed_once() -> None:
    placed = [*DISTRIBUTED, *REFERENCE, *LOCAL]
    assert len(placed) == len(set(placed))
    assert set(placed) == set(tables.metadata.tables)


def test_every_unique_key_of_a_distributed_table_holds_its_distribution_column(
        db_engine) -> None:
    """Read from the database (partitions included), not from tables.py: what a
    migration actually built."""
    with db_engine.connect() as conn:
        keys = conn.execute(text("""
            SELECT coalesce(p.relname, t.relname), i.indexrelid::regclass::text,
                   array_agg(a.attname::text)
            FROM pg_index i
            JOIN pg_class t ON t.oid = i.indrelid
            LEFT JOIN pg_inherits h ON h.inhrelid = t.oid
            LEFT JOIN pg_class p ON p.oid = h.inhparent
            JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = ANY(i.indkey)
            WHERE i.indisunique AND t.relnamespace = 'public'::regnamespace
            GROUP BY 1, 2""")).all()
    checked = {table for table, _index, _columns in keys if table in DISTRIBUTED}
    assert checked == set(DISTRIBUTED)  # each has a key, so each was checked
    wrong = [(table, index, columns) for table, index, columns in keys
             if table in DISTRIBUTED and DISTRIBUTED[table] not in columns]
    assert wrong == []


def test_the_checker_finds_an_unrouted_statement() -> None:
    assert unrouted("SELECT model FROM events WHERE ts > :t") == ["FROM events"]
    assert unrouted("INSERT INTO jobs (model, team) VALUES (:m, :t)") == ["INTO jobs"]
    assert unrouted("COPY segments (job_id, seq) FROM STDIN") == []
    assert unrouted("SELECT hour FROM fleet_hourly") == []  # local


def test_every_hot_path_statement_on_a_distributed_table_filters_by_its_column() -> None:
    found, wrong = {}, []
    for path, places in HOT_PATHS.items():
        for where in places:
            sqls = [s for s in statements(where) if any(
                t in DISTRIBUTED for _verb, t in _TABLE_REF.findall(s))]
            found[where] = len(sqls)
            wrong += [f"{path} ({where}): {m}" for s in sqls for m in unrouted(s)]
    assert [w for w, n in found.items() if n == 0] == []  # each still holds its SQL
    assert wrong == []
