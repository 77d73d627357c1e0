"""Every SQL panel and variable query runs on a PostgreSQL migrated like production.

Grafana's macros and variables are substituted as Grafana would; a few rows in the rollup,
jobs and attempts tables make every query return something, so a panel that silently
reads the wrong column or table shows up here and not in front of an operator.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import (
    ARRAY,
    BigInteger,
    Boolean,
    Connection,
    DateTime,
    Double,
    Engine,
    Integer,
    Table,
    Text,
    insert,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

pytest.importorskip("grafana_foundation_sdk")

from dashboards.queries import all_sql, expand_sql_macros
from service.store import tables

NOW = datetime(2026, 11, 29, 17, 0, tzinfo=UTC)
HOUR = NOW - timedelta(hours=3)
US_PER_S = 1_000_000

# docs/model.md section 6's worked example, one 8-GPU job of ads_ctr (team ads).
RESULT = {
    "job_id": "ads-ctr-0001", "model": "ads_ctr", "team": "ads", "state": "completed",
    "attempts": [], "held_seconds": 9600.0, "effective_seconds": 5400.0,
    "at_risk_seconds": 0.0, "ett_ratio": 0.5625,
    "components": {}, "phases": {}, "owners": {},
    "level1": {"tts_seconds": 1200.0, "nof": 1, "nof_by_cause": {"infra": 1},
               "ttr_seconds": [2640.0], "mean_ttr_seconds": 2640.0,
               "in_loop_overhead_seconds": 60.0, "final_shutdown_seconds": 300.0},
}
COMPONENT_SECONDS = {  # (component, phase, owner): seconds of the example
    ("effective_training", "training", "ads"): 5400,
    ("scheduling", "scheduling", "scheduler"): 120,
    ("initialization", "launcher_init", "trainer-platform"): 960,
    ("compilation", "compilation", "compiler"): 900,
    ("wasted_training", "checkpoint_save", "checkpointing"): 60,
    ("wasted_training", "lost_progress", "reliability"): 1740,
    ("unattributed", "unattributed", "telemetry"): 120,
    ("shutdown", "final_checkpoint", "publishing"): 300,
}


_FILLERS: dict[type, object] = {Integer: 0, BigInteger: 0, Double: 0.0, Text: "",
                                Boolean: False, ARRAY: [], JSONB: {}, DateTime: NOW}


def complete(table: Table, values: dict[str, Any]) -> dict[str, Any]:
    """`values` plus a neutral value for every other required column.

    Other parts add summary columns the dashboards do not read; filling them here keeps
    this test about the queries, not about the current column list.
    """
    out = {k: v for k, v in values.items() if k in table.c}
    for col in table.c:
        if col.name in out or col.nullable or col.server_default is not None:
            continue
        out[col.name] = next(v for t, v in _FILLERS.items() if isinstance(col.type, t))
    return out


def seed(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(insert(tables.jobs).values(complete(tables.jobs, dict(
            job_id="ads-ctr-0001", model="ads_ctr", team="ads", state="completed",
            first_at=HOUR, last_at=HOUR + timedelta(minutes=163), open=False,
            held_gpu_seconds=9600.0 * 8, effective_gpu_seconds=5400.0 * 8,
            at_risk_gpu_seconds=0.0, nof=1, tts_seconds=1200.0, ttr_seconds=[2640.0],
            ttr_causes=["infra"], result=RESULT, computed_at=NOW))))
        conn.execute(insert(tables.attempts), [
            {"job_id": "ads-ctr-0001", "attempt": 0, "allocated_at": HOUR,
             "released_at": HOUR + timedelta(minutes=82), "gpus": 8, "end_cause": "infra",
             "held_seconds": 4920.0, "startup_seconds": 1200.0},
            {"job_id": "ads-ctr-0001", "attempt": 1,
             "allocated_at": HOUR + timedelta(minutes=85),
             "released_at": HOUR + timedelta(minutes=163), "gpus": 8,
             "end_cause": "completed", "held_seconds": 4680.0, "startup_seconds": 780.0},
        ])
        rows = [{"hour": HOUR, "model": "ads_ctr", "team": "ads", "component": c, "phase": p,
                 "owner": o, "settled_gpu_us": s * 8 * US_PER_S, "unsettled_gpu_us": 0}
                for (c, p, o), s in COMPONENT_SECONDS.items()]
        # A user failure of another ads model: lost progress the model's own team owns.
        rows.append({**rows[0], "model": "ads_rank", "component": "wasted_training",
                     "phase": "lost_progress", "owner": "ads"})
        conn.execute(insert(tables.fleet_hourly), rows)
        conn.execute(insert(tables.rollup_hourly),
                     [{**r, "job_id": "ads-ctr-0001"} for r in rows])
        conn.execute(insert(tables.dirty_jobs).values(job_id="ads-ctr-0002"))
        # The example's attempts as checkpoint advice sees them (one interruption: no advice).
        conn.execute(insert(tables.checkpoint_attempts), [
            {"job_id": "ads-ctr-0001", "attempt": 0, "model": "ads_ctr", "team": "ads",
             "started_at": HOUR, "gpus": 8, "held_us": 4920 * US_PER_S, "interrupted": True,
             "blocking_save_us": 60 * US_PER_S, "durable_checkpoints": 1, "intervals_us": [],
             "lost_progress_us": 1740 * US_PER_S, "ttr_us": 2640 * US_PER_S},
            {"job_id": "ads-ctr-0001", "attempt": 1, "model": "ads_ctr", "team": "ads",
             "started_at": HOUR + timedelta(minutes=85), "gpus": 8, "held_us": 4680 * US_PER_S,
             "interrupted": False, "blocking_save_us": 0, "durable_checkpoints": 0,
             "intervals_us": [], "lost_progress_us": 0, "ttr_us": None},
        ])
        # A change marker of team ads for its ads_* models (the dashboards' annotations).
        conn.execute(insert(tables.annotations).values(
            ts=HOUR, title="pt2 cache", team="ads", models=["ads_*"], tags=["compile"]))


def run(conn: Connection, sql: str) -> list[Any]:
    # Escaped so SQLAlchemy does not read ":name" in a literal as a bind parameter.
    return list(conn.execute(text(sql.replace(":", "\\:"))).fetchall())


def test_grafana_macros_expand_like_the_postgres_datasource() -> None:
    t0, t1 = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)
    out = expand_sql_macros("SELECT $__timeGroupAlias(hour, 1h) WHERE $__timeFilter(hour) "
                            "AND x < $__timeTo()", t0, t1)
    assert out == ('SELECT floor(extract(epoch from hour)/3600)*3600 AS "time" WHERE hour '
                   "BETWEEN '2026-01-01T00:00:00Z' AND '2026-01-02T00:00:00Z' "
                   "AND x < '2026-01-02T00:00:00Z'")


@pytest.mark.parametrize("variables", [
    {"team": "ads", "model": "ads_ctr"},
    {"team": ["ads", "reliability"], "model": ["ads_ctr", "llm_7b"]},
], ids=["one value", "several values"])
def test_every_sql_query_runs_and_returns_rows(db_engine: Engine,
                                               variables: dict[str, object]) -> None:
    seed(db_engine)
    # Single-valued variables ($team on the Team dashboard) take the first pick.
    queries = all_sql(variables, NOW - timedelta(days=1), NOW)  # type: ignore[arg-type]
    assert len(queries) >= 15
    empty = []
    with db_engine.connect() as conn:
        for uid, title, sql in queries:
            rows = run(conn, sql)
            if not rows:
                empty.append((uid, title))
    assert not empty, f"returned no rows: {empty}"


def test_team_bill_counts_only_phases_the_team_owns(db_engine: Engine) -> None:
    seed(db_engine)
    [(_, _, sql)] = [q for q in all_sql({"team": "reliability", "model": "ads_ctr"},
                                        NOW - timedelta(days=1), NOW)
                     if q[0] == "ett-team" and q[1] == "Bill by phase (PostgreSQL)"]
    with db_engine.connect() as conn:
        rows = run(conn, sql)
    assert [(r[0], round(r[1], 6)) for r in rows] == [("lost_progress", round(1740 * 8 / 3600, 6))]


def test_level1_terms_add_up_to_held_gpu_hours(db_engine: Engine) -> None:
    seed(db_engine)
    [(_, _, sql)] = [q for q in all_sql({"team": "ads", "model": "ads_ctr"},
                                        NOW - timedelta(days=1), NOW)
                     if q[1] == "Level-1 terms (GPU-hours)"]
    with db_engine.connect() as conn:
        rows = run(conn, sql)
    terms = {r[0]: r[1] for r in rows}
    assert sum(terms.values()) == pytest.approx(9600 * 8 / 3600)
    assert terms["time to start (TTS)"] == pytest.approx(1200 * 8 / 3600)


@pytest.mark.parametrize("title", ["Checkpoint advice",
                                   "Checkpoint advice: largest projected savings"])
def test_checkpoint_advice_panels_agree_with_the_service_advice(api, db_engine: Engine,
                                                                title: str) -> None:
    from service.results.checkpoint_advice import checkpoint_advice
    from tests.factories import interrupted_job

    for k in range(3):
        r = api.post("/v1/events", json={"events": interrupted_job(f"h{k}", "ads_ctr", 100 * k)})
        assert r.status_code == 202
    api.post("/v1/aggregate")
    start, end = datetime(2026, 10, 31, tzinfo=UTC), datetime(2026, 11, 30, tzinfo=UTC)
    [(_, _, sql)] = [q for q in all_sql({"team": "ckpt", "model": "ads_ctr"}, start, end,
                                        include_variables=False) if q[1] == title]
    with db_engine.connect() as conn:
        [row] = conn.execute(text(sql.replace(":", "\\:"))).mappings().fetchall()
    want = checkpoint_advice(db_engine, "ads_ctr", start, end)
    assert (row["status"], row["interruptions"]) == (want["status"], want["interruptions"])
    assert row["MTBF h"] * 3600 == pytest.approx(want["mtbf_seconds"])
    assert row["save s"] == pytest.approx(want["checkpoint_cost_seconds"])
    assert row["restart s"] == pytest.approx(want["restart_overhead_seconds"])
    assert row["observed min"] * 60 == pytest.approx(want["interval_seconds"]["observed"])
    assert row["recommended min"] * 60 == pytest.approx(want["interval_seconds"]["daly"])
    assert row["ETT at observed"] == pytest.approx(want["expected_ettr"]["observed"])
    assert row["ETT at recommended"] == pytest.approx(want["expected_ettr"]["daly"])
    assert row["saving GPU-h/day"] == pytest.approx(
        want["projected_saving_gpu_hours_per_day"])
