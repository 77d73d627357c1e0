"""SQL for reads. Windows are exactly [start, end): whole weeks (UTC, from Monday) come
from a weekly rollup, the whole days around them from a daily one, the whole hours around
those from an hourly one, and the partial hours at either edge from the hour-clipped
segments, clipped again to the window, so no window is ever widened or shrunk to the data
inside it. The rollups are the fleet's label rows, the same summed over models (a window
that names no model) or summed into each model's figures (a window by model, team or
nothing): `ROLLUPS`. Also: one job, the console's charts and job pages, the checkpoint
advice sums and the figures /metrics exports. Never commits."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, text

from ett_core.taxonomy import COMPONENTS, EFFECTIVE, UNREPORTED

from .tables import MODEL_FIGURES

GROUP_COLUMNS = ("model", "team", "component", "phase", "owner")
FILTER_COLUMNS = ("model", "team", "owner")
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
WEEK = timedelta(days=7)


def floor_hour(ts: datetime) -> datetime:
    return ts.replace(minute=0, second=0, microsecond=0)


def ceil_hour(ts: datetime) -> datetime:
    floor = floor_hour(ts)
    return floor if floor == ts else floor + HOUR


def floor_day(ts: datetime) -> datetime:
    return ts.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def ceil_day(ts: datetime) -> datetime:
    floor = floor_day(ts)
    return floor if floor == ts else floor + DAY


def floor_week(ts: datetime) -> datetime:
    """Monday 00:00 UTC of the week holding `ts` (the weeks of `fleet_weekly`)."""
    day = floor_day(ts)
    return day - timedelta(days=day.weekday())


def ceil_week(ts: datetime) -> datetime:
    floor = floor_week(ts)
    return floor if floor == ts else floor + WEEK


# A filter is one value, or a list of values any of which matches.
Filters = dict[str, str | list[str] | None]


def _where(filters: Filters, exclude_components: Sequence[str]) -> tuple[str, dict]:
    clauses, params = [], {}
    for column, value in filters.items():
        if column not in FILTER_COLUMNS:
            raise ValueError(f"cannot filter on {column}")
        if isinstance(value, list):
            clauses.append(f"{column} = ANY(:f_{column})")
            params[f"f_{column}"] = value
        elif value is not None:
            clauses.append(f"{column} = :f_{column}")
            params[f"f_{column}"] = value
    if exclude_components:
        clauses.append("NOT (component = ANY(:excluded))")
        params["excluded"] = list(exclude_components)
    return "".join(f" AND {c}" for c in clauses), params


# The rollups a window reads its whole hours, days and weeks from. "fleet": every label
# set; "team": the same summed over models (no weeks: a team's week is 7 x ~100 rows);
# "model": each model's answer per team (`window_figures`).
ROLLUPS = {"fleet": {"hour": "fleet_hourly", "day": "fleet_daily", "week": "fleet_weekly"},
           "team": {"hour": "team_hourly", "day": "team_daily"},
           "model": {"hour": "model_hourly", "day": "model_daily", "week": "model_weekly"}}
# A segment's GPU-microseconds inside the window (the partial hours at its edges).
_CLIPPED = ("(extract(epoch FROM least(end_at, :end) - greatest(start_at, :start))"
            " * 1000000)::bigint * gpus")


def _spans(start: datetime, end: datetime, levels: Sequence[str], params: dict[str, Any]
           ) -> tuple[dict[str, str], list[datetime]]:
    """The window's whole weeks (if "week" is among `levels`), days and hours, each level as
    a condition on its bucket column with its bounds in `params` (no level: none), and the
    hours it only cuts (read from the segments, clipped)."""
    hs, he = ceil_hour(start), floor_hour(end)
    ds, de = ceil_day(start), floor_day(end)
    ranges: dict[str, list[tuple[datetime, datetime]]] = {}
    if ds < de:
        ws, we = ceil_week(ds), floor_week(de)
        if "week" in levels and ws < we:
            ranges["week"] = [(ws, we)]
            ranges["day"] = [(ds, ws), (we, de)]
        else:
            ranges["day"] = [(ds, de)]
        ranges["hour"] = [(hs, ds), (de, he)]
    elif hs < he:
        ranges["hour"] = [(hs, he)]
    clauses = {}
    for column, spans in ranges.items():
        parts = []
        for i, (a, b) in enumerate(r for r in spans if r[0] < r[1]):
            params.update({f"{column}{i}a": a, f"{column}{i}b": b})
            parts.append(f"({column} >= :{column}{i}a AND {column} < :{column}{i}b)")
        if parts:
            clauses[column] = " OR ".join(parts)
    partial = sorted({h for h in (floor_hour(start), floor_hour(end))
                      if not (hs <= h and h + HOUR <= he) and h < end})
    return clauses, partial


def window_rows(
    conn: Connection,
    start: datetime,
    end: datetime,
    keys: Sequence[str],
    filters: Filters | None = None,
    exclude_components: Sequence[str] = (),
    rollup: str | None = None,
) -> list[dict[str, Any]]:
    """GPU-microseconds in [start, end) grouped by `keys` (+ component), settled apart.

    Read from the team rollups when neither the keys nor the filters name a model, else
    from the fleet's (`rollup` chooses): the same rows either way, since a team row exists
    exactly when a fleet row it sums does (store/result_rows.py, `apply_deltas`)."""
    for key in keys:
        if key not in GROUP_COLUMNS:
            raise ValueError(f"cannot group by {key}")
    filters = filters or {}
    if rollup is None:
        rollup = "fleet" if "model" in keys or filters.get("model") is not None else "team"
    cols = list(dict.fromkeys([*keys, "component"]))
    select_cols = ", ".join(cols)
    where, params = _where(filters, exclude_components)
    params.update(start=start, end=end)
    tables = ROLLUPS[rollup]
    spans, partial = _spans(start, end, list(tables), params)
    parts = [f"SELECT {select_cols}, sum(settled_gpu_us) AS settled, sum(unsettled_gpu_us)"
             f" AS unsettled FROM {tables[column]} WHERE ({clause}){where}"
             f" GROUP BY {select_cols}" for column, clause in spans.items()]
    if partial:
        params["partial"] = partial
        parts.append(
            f"SELECT {select_cols}, sum(CASE WHEN settled THEN {_CLIPPED} ELSE 0 END) AS settled,"
            f" sum(CASE WHEN settled THEN 0 ELSE {_CLIPPED} END) AS unsettled FROM segments"
            f" WHERE hour = ANY(:partial) AND start_at < :end AND end_at > :start{where}"
            f" GROUP BY {select_cols}"
        )
    if not parts:
        return []
    sql = (f"SELECT {select_cols}, sum(settled) AS settled, sum(unsettled)"
           f" AS unsettled FROM ({' UNION ALL '.join(parts)}) AS w GROUP BY {select_cols}")
    # NUMERIC sums (a model-day outgrows a bigint) back as exact Python integers; rows
    # fetched at once and built from tuples (a 28-day window by model is ~10,000 rows).
    n = len(cols)
    return [{**dict(zip(cols, row[:n], strict=True)), "settled": int(row[n]),
             "unsettled": int(row[n + 1])}
            for row in conn.execute(text(sql), params).all()]


def window_figures(conn: Connection, start: datetime, end: datetime, keys: Sequence[str],
                   filters: Filters | None = None) -> list[dict[str, Any]]:
    """A window's figures by model and team (`keys`: some of them; none: one row, if any
    time was held), from the model rollups: GPU-microseconds per component, at risk and
    unreported (`tables.MODEL_FIGURES`), what `window_rows` gives summed, with a row for
    exactly the groups it has rows for (a model row exists when a fleet row it sums does)."""
    if not set(keys) <= {"model", "team"} or not set(filters or {}) <= {"model", "team"}:
        raise ValueError("the model rollups hold models and teams")
    cols = list(keys) or ["1"]  # grouped by a constant: no time held, no row
    select_cols = ", ".join(cols)
    where, params = _where(filters or {}, ())
    params.update(start=start, end=end)
    tables = ROLLUPS["model"]
    spans, partial = _spans(start, end, list(tables), params)
    sums = ", ".join(f"sum({f}) AS {f}" for f in MODEL_FIGURES)
    parts = [f"SELECT {select_cols}, {sums} FROM {tables[column]} WHERE ({clause}){where}"
             f" GROUP BY {select_cols}" for column, clause in spans.items()]
    if partial:
        params["partial"] = partial
        clipped = [*(f"component = '{c}'" for c in COMPONENTS),
                   f"component = '{EFFECTIVE}' AND NOT settled", f"phase = '{UNREPORTED}'"]
        figures = ", ".join(f"sum({_CLIPPED}) FILTER (WHERE {which}) AS {f}"
                            for which, f in zip(clipped, MODEL_FIGURES, strict=True))
        parts.append(
            f"SELECT {select_cols}, {figures} FROM segments"
            f" WHERE hour = ANY(:partial) AND start_at < :end AND end_at > :start{where}"
            f" GROUP BY {select_cols}")
    if not parts:
        return []
    sql = (f"SELECT {select_cols}, {sums} FROM ({' UNION ALL '.join(parts)}) AS w"
           f" GROUP BY {select_cols}")
    n = len(cols)
    out = []
    for row in conn.execute(text(sql), params).all():
        figures = [int(v or 0) for v in row[n:]]  # a component no row of the group held: NULL
        out.append({**dict(zip(keys, row[:len(keys)], strict=True)),
                    "components": dict(zip(COMPONENTS, figures[:-2], strict=True)),
                    "at_risk": figures[-2], "unreported": figures[-1]})
    return out


def job_result(conn: Connection, job_id: str) -> dict[str, Any] | None:
    row = conn.execute(text("SELECT result FROM jobs WHERE job_id = :j"), {"j": job_id}).first()
    return None if row is None else row[0]


def job_has_events(conn: Connection, job_id: str) -> bool:
    return conn.execute(
        text("SELECT EXISTS (SELECT 1 FROM events WHERE job_id = :j)"), {"j": job_id}
    ).scalar_one()


# A loose index scan of ix_jobs_team_model: each step is one probe for the next pair, so
# the cost is the number of pairs (about the models), not of jobs (a DISTINCT over `jobs`
# read every job's row: a full page each, since results are stored inline).
_PAIRS = """
    WITH RECURSIVE p(team, model) AS (
        (SELECT team, model FROM jobs WHERE {where} ORDER BY team, model LIMIT 1)
        UNION ALL
        SELECT n.team, n.model FROM p CROSS JOIN LATERAL (
            SELECT team, model FROM jobs WHERE (team, model) > (p.team, p.model) AND {where}
            ORDER BY team, model LIMIT 1) n
    )
    SELECT model, team FROM p ORDER BY model, team
"""


def models_and_teams(conn: Connection, team: str | None = None) -> list[tuple[str, str]]:
    """Every (model, team) of a job; only `team`'s if given."""
    where, params = ("true", {}) if team is None else ("team = :t", {"t": team})
    rows = conn.execute(text(_PAIRS.format(where=where)), params)
    return [(r[0], r[1]) for r in rows]


# Stalls (docs/model.md section 24) for /metrics: jobs with a stall going on now (the
# latest result of a running job says since when), and stalled GPU-time settled so far.
_STALLED_NOW = "$.progress[*] ? (@.stalled_since != null)"


def stalled_jobs(conn: Connection) -> dict[tuple[str, str], int]:
    """Running jobs stalled now, by (model, team)."""
    rows = conn.execute(text(
        "SELECT model, team, count(*) FROM jobs"
        " WHERE open AND jsonb_path_exists(result, CAST(:path AS jsonpath))"
        " GROUP BY model, team"), {"path": _STALLED_NOW})
    return {(model, team): n for model, team, n in rows}


def stalled_gpu_us(conn: Connection, phase: str) -> dict[tuple[str, str], int]:
    """Settled GPU-microseconds of the derived phase `phase`, by (model, team), all time."""
    rows = conn.execute(text(
        "SELECT model, team, sum(settled_gpu_us)::bigint FROM fleet_weekly"
        " WHERE phase = :phase GROUP BY model, team"), {"phase": phase})
    return {(model, team): int(gpu_us) for model, team, gpu_us in rows}


# The scheduler's word (docs/model.md): read from each job's result document, where the
# core put queue time and each attempt's instrumentation.
SCHEDULER_TOTALS_SQL = """
SELECT j.model, j.team,
       coalesce(sum((j.result->>'queue_seconds')::float8), 0),
       coalesce(sum(u.gpu_s), 0)
FROM jobs j LEFT JOIN LATERAL (
    SELECT sum((a->>'held_seconds')::float8 * (a->>'gpus')::float8) AS gpu_s
    FROM jsonb_array_elements(j.result->'attempts') a
    WHERE a->>'instrumented' = 'false' AND a->>'released_at' IS NOT NULL) u ON true
GROUP BY j.model, j.team
"""

SILENT_JOBS_SQL = """
SELECT j.model, j.team, count(DISTINCT j.job_id)
FROM jobs j, jsonb_array_elements(j.result->'attempts') a
WHERE j.open AND a->>'released_at' IS NULL AND a->>'held_by' = 'scheduler'
  AND a->>'instrumented' = 'true' AND (a->>'trainer_last_at')::timestamptz < :cutoff
GROUP BY j.model, j.team
"""


def scheduler_totals(conn: Connection) -> list[tuple[str, str, float, float]]:
    """Per (model, team): queue seconds of every attempt the scheduler reported, and held
    GPU-seconds of ended attempts no trainer reported (uninstrumented)."""
    return [(r[0], r[1], float(r[2]), float(r[3]))
            for r in conn.execute(text(SCHEDULER_TOTALS_SQL))]


def silent_jobs(conn: Connection, cutoff: datetime) -> list[tuple[str, str, int]]:
    """Per (model, team): running jobs whose scheduler holds an attempt that its trainer has
    reported but not since `cutoff`."""
    return [(r[0], r[1], int(r[2]))
            for r in conn.execute(text(SILENT_JOBS_SQL), {"cutoff": cutoff})]


def queue_window(conn: Connection, start: datetime, end: datetime, key: str | None,
                 filters: Filters | None = None) -> dict[Any, float]:
    """Queue seconds of the attempts allocated in [start, end), per `key` (model or team;
    None: one total). Queue time is not held time: it has no hourly rollup of its own and
    is read from the job documents (docs/model.md section 25)."""
    if key not in (None, "model", "team"):
        raise ValueError(f"cannot group queue time by {key}")
    clauses, params = "", {}
    for column in ("model", "team"):
        value = (filters or {}).get(column)
        if isinstance(value, list):
            clauses += f" AND j.{column} = ANY(:f_{column})"
            params[f"f_{column}"] = value
        elif value is not None:
            clauses += f" AND j.{column} = :f_{column}"
            params[f"f_{column}"] = value
    select = f"j.{key}" if key else "NULL"
    # A job's queue seconds are its attempts' (none negative): only the jobs with some, on
    # their partial index (ix_jobs_queued_last_at), have attempts to unpack.
    rows = conn.execute(text(
        f"SELECT {select} AS k, sum((a->>'queue_seconds')::float8)"
        " FROM jobs j, jsonb_array_elements(j.result->'attempts') a"
        " WHERE (j.result ->> 'queue_seconds')::float8 > 0"
        " AND j.last_at >= :start AND j.first_at < :end"
        " AND (a->>'allocated_at')::timestamptz >= :start"
        " AND (a->>'allocated_at')::timestamptz < :end"
        f" AND (a->>'queue_seconds')::float8 > 0{clauses}"
        " GROUP BY 1"), {"start": start, "end": end, **params})
    return {r[0]: float(r[1]) for r in rows}


# --- the console's charts: ETT over time ------------------------------------------------

SERIES_FILTERS = ("model", "team", "owner")
SERIES_STEPS = ("hour", "day")


def component_series(conn: Connection, start: datetime, end: datetime, step: str,
                     filters: dict[str, str | None] | None = None, rollup: str | None = None
                     ) -> list[dict[str, Any]]:
    """Rows of (at, component, held, unsettled) GPU-microseconds per whole step (hour or
    UTC day) of the fleet rollups, steps in [start, end): the team rollups' unless a model
    is named (`rollup` chooses; the same sums either way)."""
    if step not in SERIES_STEPS:
        raise ValueError(f"step: must be one of {', '.join(SERIES_STEPS)}")
    if rollup is None:
        rollup = "team" if (filters or {}).get("model") is None else "fleet"
    table, column = ROLLUPS[rollup][step], step
    clauses, params = [], {"start": start, "end": end}
    for name, value in (filters or {}).items():
        if name not in SERIES_FILTERS:
            raise ValueError(f"cannot filter on {name}")
        if value is not None:
            clauses.append(f" AND {name} = :f_{name}")
            params[f"f_{name}"] = value
    sql = (f"SELECT {column} AS at, component,"
           f" sum(settled_gpu_us + unsettled_gpu_us) AS held,"
           f" sum(unsettled_gpu_us) AS unsettled FROM {table}"
           f" WHERE {column} >= :start AND {column} < :end{''.join(clauses)}"
           f" GROUP BY {column}, component ORDER BY {column}")
    # NUMERIC sums (a model-day outgrows a bigint) back as exact Python integers.
    return [{**row._mapping, "held": int(row.held), "unsettled": int(row.unsettled)}
            for row in conn.execute(text(sql), params)]


# --- a model's jobs and one job's timeline (each on an index: jobs by (model, last_at),
# segments and events by job) ------------------------------------------------------------

def recent_jobs(conn: Connection, model: str, limit: int = 20) -> list[dict[str, Any]]:
    rows = conn.execute(text(
        "SELECT job_id, team, state, first_at, last_at, open, held_gpu_seconds,"
        " effective_gpu_seconds, at_risk_gpu_seconds, nof FROM jobs WHERE model = :m"
        " ORDER BY last_at DESC LIMIT :n"), {"m": model, "n": limit})
    return [dict(row._mapping) for row in rows]


def level1_rows(conn: Connection, model: str, since: datetime) -> list[dict[str, Any]]:
    """Level-1 figures of the model's jobs active since `since` (last news at or after it)."""
    rows = conn.execute(text(
        "SELECT job_id, tts_seconds, nof, ttr_seconds, ttr_causes FROM jobs"
        " WHERE model = :m AND last_at >= :since"), {"m": model, "since": since})
    return [dict(row._mapping) for row in rows]


def job_segments(conn: Connection, job_id: str) -> list[dict[str, Any]]:
    """The job's stored segments (clipped at hour boundaries), in time order per attempt."""
    rows = conn.execute(text(
        "SELECT attempt, start_at, end_at, gpus, component, phase, owner, settled"
        " FROM segments WHERE job_id = :j ORDER BY attempt, start_at, seq"), {"j": job_id})
    return [dict(row._mapping) for row in rows]


def job_marks(conn: Connection, job_id: str) -> list[dict[str, Any]]:
    """The job's failure and checkpoint events (a checkpoint event means durable)."""
    rows = conn.execute(text(
        "SELECT attempt, ts, type, attrs FROM events WHERE job_id = :j"
        " AND type IN ('failure', 'checkpoint') ORDER BY ts"), {"j": job_id})
    return [dict(row._mapping) for row in rows]


# --- checkpoint advice: attempts that started in [start, end), summed per model ---------

# The median interval is computed in the database: a busy model has tens of thousands of
# intervals a month. The window is scanned twice rather than through a shared CTE, which
# PostgreSQL would materialise whole (arrays included): half the time for 500 models
# (bench/advice.py). The intervals are unnested in the index's order by model (what
# percentile_cont groups by), not one function scan per attempt nor a sort of them all;
# each model's latest team is one index probe, not a sort of its attempts by start (at
# 36 days, 57,557 attempts and 484,216 intervals: 848 -> ~300 ms, docs/performance.md).
_ADVICE_WINDOW = "started_at >= :start AND started_at < :end {model_filter}"
_ADVICE_SUMS = f"""
    WITH s AS (
        SELECT model, sum(held_us) AS held_us, sum(held_us::numeric * gpus) AS held_gpu_us,
               count(*) FILTER (WHERE interrupted) AS interruptions,
               sum(blocking_save_us) AS blocking_save_us,
               sum(durable_checkpoints) AS durable_checkpoints,
               coalesce(sum(ttr_us) FILTER (WHERE interrupted), 0) AS ttr_us,
               coalesce(sum(lost_progress_us) FILTER (WHERE interrupted), 0) AS lost_us
        FROM checkpoint_attempts WHERE {_ADVICE_WINDOW}
        GROUP BY model
    ), med AS (
        SELECT model, percentile_cont(0.5) WITHIN GROUP (ORDER BY i) AS median_us
        FROM (SELECT model, unnest(intervals_us) AS i FROM checkpoint_attempts
              WHERE {_ADVICE_WINDOW} ORDER BY model) AS intervals
        GROUP BY model
    )
    SELECT s.model, latest.team, s.held_us, s.held_gpu_us, s.interruptions,
           s.blocking_save_us, s.durable_checkpoints, s.ttr_us, s.lost_us, med.median_us
    FROM s LEFT JOIN med ON med.model = s.model
    CROSS JOIN LATERAL (
        SELECT team FROM checkpoint_attempts c
        WHERE c.model = s.model AND c.started_at >= :start AND c.started_at < :end
        ORDER BY c.started_at DESC, c.team DESC LIMIT 1) AS latest
    ORDER BY s.model
"""


def checkpoint_sums(conn: Connection, start: datetime, end: datetime, model: str | None
                    ) -> list[Any]:
    """Per model (only `model` if given), by name: its latest team, held time and GPU time,
    interruptions, blocking save time, durable checkpoints, TTR and lost progress of the
    interrupted attempts, and the median checkpoint interval (microseconds)."""
    sql = _ADVICE_SUMS.format(model_filter="AND model = :model" if model is not None else "")
    params: dict[str, Any] = {"start": start, "end": end}
    if model is not None:
        params["model"] = model
    return list(conn.execute(text(sql), params))


# --- what /metrics exports, read once per aggregation pass --------------------------------

def first_seen(conn: Connection) -> list[tuple[str, str, datetime]]:
    """When each (model, team) was first seen (its earliest job)."""
    return [tuple(r) for r in conn.execute(text(  # type: ignore[misc]
        "SELECT model, team, min(first_at) FROM jobs GROUP BY model, team"))]


def settled_totals(conn: Connection) -> list[tuple[str, str, str, str, float]]:
    """All-time settled GPU-microseconds per (model, team, component, owner)."""
    return [tuple(r) for r in conn.execute(text(  # type: ignore[misc]
        "SELECT model, team, component, owner, settled_gpu_us::float8 FROM settled_totals"))]


def job_counts(conn: Connection) -> list[tuple[str, str, int, float, int]]:
    """Per (model, team): running jobs, their at-risk GPU-seconds, unknown-phase events."""
    return [tuple(r) for r in conn.execute(text(  # type: ignore[misc]
        "SELECT model, team, count(*) FILTER (WHERE open),"
        " coalesce(sum(at_risk_gpu_seconds) FILTER (WHERE open), 0),"
        " sum(unknown_phase_events) FROM jobs GROUP BY model, team"))]


def failure_counts(conn: Connection) -> list[tuple[str, str, str, int]]:
    """Failures per (model, team, cause)."""
    return [tuple(r) for r in conn.execute(text(  # type: ignore[misc]
        "SELECT model, team, c, count(*) FROM jobs, unnest(ttr_causes) AS c"
        " GROUP BY model, team, c"))]


def level1_times(conn: Connection) -> list[tuple[str, float | None, list[float], list[str]]]:
    """Per job with a start or a recovery: team, TTS, TTRs and their causes (seconds)."""
    return [tuple(r) for r in conn.execute(text(  # type: ignore[misc]
        "SELECT team, tts_seconds, ttr_seconds, ttr_causes FROM jobs"
        " WHERE tts_seconds IS NOT NULL OR cardinality(ttr_seconds) > 0"))]
