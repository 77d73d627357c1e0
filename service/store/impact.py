"""SQL for impact (docs/impact.md): the per-job `job_impact` rows, cohort sums over them,
and the `annotations` (change markers).

The aggregator writes one `job_impact` row per job in its result transaction; cohorts are
one indexed sum over those rows, so a cohort of 10,000 jobs costs one scan of 10,000 rows.
Every function runs in the caller's transaction; none commits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import Connection, Row, text

from ett_core import JobComputation
from ett_core.impact import OVERHEAD_TERMS, Cohort, job_impact, union_labels
from ett_core.instants import format_rfc3339_us
from ett_core.taxonomy import COMPONENTS

from . import copy_text as fmt
from .tables import impact_column

_OVERHEAD_COLUMNS = [impact_column(t, c) for t in OVERHEAD_TERMS for c in COMPONENTS]
_ROW_COLUMNS = ["job_id", "model", "team", "first_at", "running", "labels", "held_gpu_us",
                "effective_gpu_us", "nof", "tts_us", "ttr_us", *_OVERHEAD_COLUMNS]


# --- the aggregator's write -------------------------------------------------------------

_LOAD_LABELS = """
    SELECT job_id, attempt, attrs->'labels' FROM events
    WHERE job_id = ANY(:ids) AND type = 'allocated' AND jsonb_typeof(attrs->'labels') = 'object'
    ORDER BY job_id, attempt, ts
"""


def _labels_by_job(conn: Connection, job_ids: Sequence[str]) -> dict[str, dict[str, str]]:
    allocations: dict[str, list[Mapping[str, Any]]] = {}
    for job_id, _attempt, labels in conn.execute(text(_LOAD_LABELS), {"ids": list(job_ids)}):
        allocations.setdefault(job_id, []).append(labels)  # in attempt order
    return {job_id: union_labels(labels) for job_id, labels in allocations.items()}


def replace_job_impact(conn: Connection, replaced: Sequence[str],
                       computed: Mapping[str, JobComputation],
                       known: Mapping[str, dict[str, str]] | None = None
                       ) -> dict[str, dict[str, str]]:
    """Replace the `job_impact` rows of `replaced` jobs by those of their computations
    (a replaced job without a computation, one with no attempts, keeps no row); return
    the jobs' labels. `known`: labels known already (`ett_core.impact.job_labels` of the
    events a pass read whole; a resumed job's from its last pass, when it has no new
    allocation since, ett_core.resume): reading them means reading all of a job's events."""
    if not replaced:
        return {}
    conn.execute(text("DELETE FROM job_impact WHERE job_id = ANY(:ids)"),
                 {"ids": list(replaced)})
    jobs = [j for j in replaced if j in computed]
    if not jobs:
        return {}
    known = known or {}
    labels = {j: known[j] for j in jobs if j in known}
    unknown = [j for j in jobs if j not in known]
    if unknown:
        read = _labels_by_job(conn, unknown)
        labels.update((j, read.get(j, {})) for j in unknown)
    # COPY text: a running job's row is rewritten every pass, and COPY is the cheapest
    # way in (a JSON document per row unpacked by jsonb_to_recordset cost twice as much).
    lines = []
    for job_id in jobs:
        result = computed[job_id].result
        one = job_impact(result)
        gpu = one.overhead_gpu_us
        lines.append("\t".join((
            fmt.text(job_id), fmt.text(result.model), fmt.text(result.team),
            format_rfc3339_us(result.attempts[0].allocated_at_us), fmt.boolean(one.running),
            fmt.json_text(orjson.dumps(labels.get(job_id, {})).decode()),
            str(one.held_gpu_us), str(one.effective_gpu_us), str(one.nof), str(one.tts_us),
            str(one.ttr_us), *(str(gpu[t][c]) for t in OVERHEAD_TERMS for c in COMPONENTS),
        )) + "\n")
    raw = conn.connection.driver_connection
    with raw.cursor() as cur:  # type: ignore[union-attr]
        fmt.copy_rows(cur, "job_impact", _ROW_COLUMNS, lines)
    return labels


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


def load_cohort(conn: Connection, start: datetime, end: datetime, model: str | None = None,
                team: str | None = None, labels: Mapping[str, str] | None = None) -> Cohort:
    """The sums of the jobs first allocated in [start, end), of models matching the glob
    `model`, of `team`, holding every one of `labels`."""
    where = ["first_at >= :start", "first_at < :end"]
    params: dict[str, Any] = {"start": start, "end": end}
    if model is not None:
        where.append("model LIKE :model")
        params["model"] = glob_to_like(model)
    if team is not None:
        where.append("team = :team")
        params["team"] = team
    if labels:
        where.append("labels @> CAST(:labels AS jsonb)")
        params["labels"] = orjson.dumps(dict(labels)).decode()
    row = conn.execute(text(
        f"SELECT count(*) FILTER (WHERE NOT running), count(*) FILTER (WHERE running), {_SUMS}"
        f" FROM job_impact WHERE {' AND '.join(where)}"), params).one()
    jobs, running, held, effective, nof, tts, ttr, *cells = (int(v) for v in row)
    it = iter(cells)
    overhead = {t: {c: next(it) for c in COMPONENTS} for t in OVERHEAD_TERMS}
    return Cohort(jobs, running, held, effective, nof, tts, ttr, overhead)


# --- annotations ------------------------------------------------------------------------

_ANNOTATION = "id, ts, title, text, team, models, tags, created_by"


def lock_team_annotations(conn: Connection, team: str | None) -> None:
    """One writer at a time per team (None: the fleet) until the transaction ends."""
    conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:key))"),
                 {"key": f"annotations:{team or ''}"})


def count_annotations(conn: Connection, team: str | None) -> int:
    return conn.execute(text("SELECT count(*) FROM annotations"
                             " WHERE team IS NOT DISTINCT FROM :team"),
                        {"team": team}).scalar_one()


def insert_annotation(conn: Connection, ts: datetime, title: str, body: str | None,
                      team: str | None, models: Sequence[str], tags: Sequence[str],
                      created_by: str | None) -> int:
    return conn.execute(text(
        "INSERT INTO annotations (ts, title, text, team, models, tags, created_by)"
        " VALUES (:ts, :title, :body, :team, :models, :tags, :by) RETURNING id"),
        {"ts": ts, "title": title, "body": body, "team": team, "models": list(models),
         "tags": list(tags), "by": created_by}).scalar_one()


def delete_annotation(conn: Connection, annotation_id: int, team: str | None = None,
                      any_team: bool = False) -> bool:
    """Delete one annotation (of `team` unless `any_team`); whether one was deleted."""
    where = "id = :i" if any_team else "id = :i AND team IS NOT DISTINCT FROM :team"
    return conn.execute(text(f"DELETE FROM annotations WHERE {where}"),
                        {"i": annotation_id, "team": team}).rowcount > 0


def annotation_rows(conn: Connection, start: datetime, end: datetime, team: str | None,
                    tag: str | None, limit: int, after: tuple[datetime, int] | None
                    ) -> Sequence[Row[Any]]:
    """Annotations in [start, end) in (ts, id) order, at most `limit`, those after `after`;
    a team's include the fleet-wide ones (no team), which concern every team."""
    where, params = ["ts >= :start", "ts < :end"], {"start": start, "end": end}
    if team is not None:
        where.append("(team = :team OR team IS NULL)")
        params["team"] = team
    if tag is not None:
        where.append(":tag = ANY(tags)")
        params["tag"] = tag
    if after is not None:
        where.append("(ts, id) > (:after_ts, :after_id)")
        params.update(after_ts=after[0], after_id=after[1])
    params["limit"] = limit
    return conn.execute(text(f"SELECT {_ANNOTATION} FROM annotations"
                             f" WHERE {' AND '.join(where)} ORDER BY ts, id"
                             " LIMIT :limit"), params).all()


def annotation_row(conn: Connection, annotation_id: int) -> Row[Any] | None:
    return conn.execute(text(f"SELECT {_ANNOTATION} FROM annotations WHERE id = :i"),
                        {"i": annotation_id}).one_or_none()
