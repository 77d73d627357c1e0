"""SQL for impact (docs/impact.md): per-job Level-1 GPU time, cohorts, annotations.

The aggregator writes one `job_impact` row per job in its result transaction; cohorts are
one indexed sum over those rows, so a cohort of 10,000 jobs costs one scan of 10,000 rows.
The public functions return plain dicts (the API, the CLI and the console share them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson
from sqlalchemy import Connection, Engine, text

from ett_core import JobComputation
from ett_core.impact import OVERHEAD_TERMS, Cohort, impact, job_impact, whatif
from ett_core.instants import format_rfc3339_us
from ett_core.taxonomy import COMPONENTS
from service.store.tables import impact_column

_OVERHEAD_COLUMNS = [impact_column(t, c) for t in OVERHEAD_TERMS for c in COMPONENTS]
_ROW_COLUMNS = ["job_id", "model", "team", "first_at", "running", "labels", "held_gpu_us",
                "effective_gpu_us", "nof", "tts_us", "ttr_us", *_OVERHEAD_COLUMNS]


@dataclass(frozen=True)
class Selector:
    """Which jobs a cohort holds: first allocation in [start, end), model glob, team, labels."""

    start: datetime
    end: datetime
    model: str | None = None  # a glob: * and ? as in token model patterns
    team: str | None = None
    labels: Mapping[str, str] | None = None


# --- the aggregator's write -------------------------------------------------------------

_LOAD_LABELS = """
    SELECT job_id, attempt, attrs->'labels' FROM events
    WHERE job_id = ANY(:ids) AND type = 'allocated' AND jsonb_typeof(attrs->'labels') = 'object'
    ORDER BY job_id, attempt, ts
"""


def _labels_by_job(conn: Connection, job_ids: Sequence[str]) -> dict[str, dict[str, str]]:
    # The union over attempts, a later attempt winning a key (rows come in attempt order).
    # Only string pairs: events stored before labels were validated may hold anything.
    merged: dict[str, dict[str, str]] = {}
    for job_id, _attempt, labels in conn.execute(text(_LOAD_LABELS), {"ids": list(job_ids)}):
        into = merged.setdefault(job_id, {})
        into.update((k, v) for k, v in labels.items() if isinstance(v, str))
    return merged


def replace_job_impact(conn: Connection, replaced: Sequence[str],
                       computed: Mapping[str, JobComputation]) -> None:
    """Replace the `job_impact` rows of `replaced` jobs by those of their computations
    (a replaced job without a computation, one with no attempts, keeps no row)."""
    if not replaced:
        return
    conn.execute(text("DELETE FROM job_impact WHERE job_id = ANY(:ids)"),
                 {"ids": list(replaced)})
    jobs = [j for j in replaced if j in computed]
    if not jobs:
        return
    labels = _labels_by_job(conn, jobs)
    rows = []
    for job_id in jobs:
        result = computed[job_id].result
        one = job_impact(result)
        rows.append({
            "job_id": job_id, "model": result.model, "team": result.team,
            "first_at": format_rfc3339_us(result.attempts[0].allocated_at_us),
            "running": one.running, "labels": labels.get(job_id, {}),
            "held_gpu_us": one.held_gpu_us, "effective_gpu_us": one.effective_gpu_us,
            "nof": one.nof, "tts_us": one.tts_us, "ttr_us": one.ttr_us,
            **{impact_column(t, c): one.overhead_gpu_us[t][c]
               for t in OVERHEAD_TERMS for c in COMPONENTS},
        })
    types = {"job_id": "text", "model": "text", "team": "text", "first_at": "timestamptz",
             "running": "boolean", "labels": "jsonb", "nof": "integer"}
    record = ", ".join(f"{c} {types.get(c, 'bigint')}" for c in _ROW_COLUMNS)
    names = ", ".join(_ROW_COLUMNS)
    conn.execute(text(
        f"INSERT INTO job_impact ({names}) SELECT {names}"
        f" FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r({record})"),
        {"rows": orjson.dumps(rows).decode()})


def job_labels(conn: Connection, job_id: str) -> dict[str, str]:
    labels = conn.execute(text("SELECT labels FROM job_impact WHERE job_id = :j"),
                          {"j": job_id}).scalar_one_or_none()
    return dict(sorted((labels or {}).items()))


# --- cohorts --------------------------------------------------------------------------

def glob_to_like(pattern: str) -> str:
    """`ads_*` -> `ads\\_%`: the token patterns' glob, as a LIKE pattern."""
    out = []
    for ch in pattern:
        if ch in "\\%_":
            out.append("\\" + ch)
        elif ch == "*":
            out.append("%")
        elif ch == "?":
            out.append("_")
        else:
            out.append(ch)
    return "".join(out)


# NUMERIC, read back as Python integers: a cohort's sum outgrows a bigint.
_SUMS = ", ".join(f"coalesce(sum({c}) FILTER (WHERE NOT running), 0)::numeric"
                  for c in ["held_gpu_us", "effective_gpu_us", "nof", "tts_us", "ttr_us",
                            *_OVERHEAD_COLUMNS])


def load_cohort(conn: Connection, selector: Selector) -> Cohort:
    where = ["first_at >= :start", "first_at < :end"]
    params: dict[str, Any] = {"start": selector.start, "end": selector.end}
    if selector.model is not None:
        where.append("model LIKE :model")
        params["model"] = glob_to_like(selector.model)
    if selector.team is not None:
        where.append("team = :team")
        params["team"] = selector.team
    if selector.labels:
        where.append("labels @> CAST(:labels AS jsonb)")
        params["labels"] = orjson.dumps(dict(selector.labels)).decode()
    row = conn.execute(text(
        f"SELECT count(*) FILTER (WHERE NOT running), count(*) FILTER (WHERE running), {_SUMS}"
        f" FROM job_impact WHERE {' AND '.join(where)}"), params).one()
    jobs, running, held, effective, nof, tts, ttr, *cells = (int(v) for v in row)
    it = iter(cells)
    overhead = {t: {c: next(it) for c in COMPONENTS} for t in OVERHEAD_TERMS}
    return Cohort(jobs, running, held, effective, nof, tts, ttr, overhead)


def _selector_wire(s: Selector) -> dict[str, Any]:
    return {"start": s.start.isoformat(), "end": s.end.isoformat(), "model": s.model,
            "team": s.team, "labels": dict(s.labels or {})}


def impact_report(engine: Engine, baseline: Selector, candidate: Selector) -> dict[str, Any]:
    """The `GET /v1/impact` document (each cohort also says how it was selected)."""
    with engine.connect() as conn:
        b, c = load_cohort(conn, baseline), load_cohort(conn, candidate)
    out = impact(b, c)
    out["baseline"]["selector"] = _selector_wire(baseline)
    out["candidate"]["selector"] = _selector_wire(candidate)
    return out


def whatif_report(engine: Engine, selector: Selector, component: str,
                  reduction: float) -> dict[str, Any]:
    """The `GET /v1/whatif` document; ValueError names a bad component or reduction."""
    with engine.connect() as conn:
        cohort = load_cohort(conn, selector)
    out = whatif(cohort, component, reduction)
    out["cohort"]["selector"] = _selector_wire(selector)
    return out


# --- annotations ------------------------------------------------------------------------

_ANNOTATION = "id, ts, title, text, team, models, tags, created_by"


def _annotation_wire(row: Any) -> dict[str, Any]:
    return {"id": row[0], "ts": row[1].isoformat(), "title": row[2], "text": row[3],
            "team": row[4], "models": list(row[5]), "tags": list(row[6]),
            "created_by": row[7]}


def add_annotation(engine: Engine, ts: datetime, title: str, body: str | None,
                   team: str | None, models: Sequence[str], tags: Sequence[str],
                   created_by: str | None, max_per_team: int | None = None) -> int | None:
    """The new annotation's id, or None if its team (None: the fleet) already holds
    `max_per_team`."""
    with engine.begin() as conn:
        if max_per_team is not None:
            # One writer at a time per team, so two posts cannot both take the last place.
            conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:key))"),
                         {"key": f"annotations:{team or ''}"})
            held = conn.execute(text("SELECT count(*) FROM annotations"
                                     " WHERE team IS NOT DISTINCT FROM :team"),
                                {"team": team}).scalar_one()
            if held >= max_per_team:
                return None
        return conn.execute(text(
            "INSERT INTO annotations (ts, title, text, team, models, tags, created_by)"
            " VALUES (:ts, :title, :body, :team, :models, :tags, :by) RETURNING id"),
            {"ts": ts, "title": title, "body": body, "team": team, "models": list(models),
             "tags": list(tags), "by": created_by}).scalar_one()


def delete_annotation(engine: Engine, annotation_id: int, team: str | None = None,
                      any_team: bool = False) -> bool:
    """Delete one annotation (of `team` unless `any_team`); whether one was deleted."""
    where = "id = :i" if any_team else "id = :i AND team IS NOT DISTINCT FROM :team"
    with engine.begin() as conn:
        return conn.execute(text(f"DELETE FROM annotations WHERE {where}"),
                            {"i": annotation_id, "team": team}).rowcount > 0


@dataclass(frozen=True)
class Page:
    """One page of annotations in (ts, id) order, and where the next one starts."""

    annotations: list[dict[str, Any]]
    next_after: tuple[datetime, int] | None


def list_annotations(engine: Engine, start: datetime, end: datetime, team: str | None = None,
                     tag: str | None = None, limit: int = 100,
                     after: tuple[datetime, int] | None = None) -> Page:
    """Annotations in [start, end) in (ts, id) order: at most `limit`, those after `after`
    (the last of the previous page), so a page never skips or repeats one."""
    where, params = ["ts >= :start", "ts < :end"], {"start": start, "end": end}
    if team is not None:
        # Fleet-wide annotations (no team) concern every team.
        where.append("(team = :team OR team IS NULL)")
        params["team"] = team
    if tag is not None:
        where.append(":tag = ANY(tags)")
        params["tag"] = tag
    if after is not None:
        where.append("(ts, id) > (:after_ts, :after_id)")
        params.update(after_ts=after[0], after_id=after[1])
    params["limit"] = limit + 1
    with engine.connect() as conn:
        rows = conn.execute(text(f"SELECT {_ANNOTATION} FROM annotations"
                                 f" WHERE {' AND '.join(where)} ORDER BY ts, id"
                                 " LIMIT :limit"), params).all()
    more = len(rows) > limit
    rows = rows[:limit]
    return Page([_annotation_wire(r) for r in rows],
                (rows[-1][1], rows[-1][0]) if more else None)


def get_annotation(engine: Engine, annotation_id: int) -> dict[str, Any] | None:
    with engine.connect() as conn:
        row = conn.execute(text(f"SELECT {_ANNOTATION} FROM annotations WHERE id = :i"),
                           {"i": annotation_id}).one_or_none()
    return None if row is None else _annotation_wire(row)


def around(ts: datetime, days: float) -> tuple[tuple[datetime, datetime],
                                               tuple[datetime, datetime]]:
    """N days before an instant against N days after it."""
    span = timedelta(days=days)
    # Clamped at the calendar's ends: an annotation stored before its `ts` was bounded
    # may lie in year 1 or 9999.
    lo = ts - span if ts - datetime.min.replace(tzinfo=ts.tzinfo) > span else datetime.min
    hi = ts + span if datetime.max.replace(tzinfo=ts.tzinfo) - ts > span else datetime.max
    return (lo.replace(tzinfo=ts.tzinfo), ts), (ts, hi.replace(tzinfo=ts.tzinfo))
