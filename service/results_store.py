"""SQL for the aggregator: load events, replace job results, keep fleet rollups by delta.

Never commits: `service.aggregate` owns each transaction.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from psycopg.types.json import set_json_loads
from sqlalchemy import Connection, text

from ett_core import Event, JobComputation
from ett_core.instants import HOUR_US
from ett_core.rollup import split_at_hours

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Advisory-lock namespace for "this job is being recomputed" (two-int form, so it can
# never collide with the migration lock, which uses the one-bigint form).
JOB_LOCK_CLASS = 0x455454  # "ETT"

FleetKey = tuple[int, str, str, str, str, str]  # hour_us, model, team, component, phase, owner
TotalKey = tuple[str, str, str, str]  # model, team, component, owner


def us_to_dt(ts_us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=ts_us)


def dt_to_us(ts: datetime) -> int:
    return (ts - _EPOCH) // timedelta(microseconds=1)


def dirty_candidates(conn: Connection) -> dict[str, datetime]:
    """Jobs with unprocessed events, with the time their oldest mark was queued."""
    rows = conn.execute(text("SELECT job_id, min(marked_at) FROM dirty_jobs GROUP BY job_id"))
    return {job_id: marked for job_id, marked in rows}


def open_jobs(conn: Connection) -> list[str]:
    """Jobs whose result depends on `now` (running attempts, pending heartbeat timeouts)."""
    return [r[0] for r in conn.execute(text("SELECT job_id FROM jobs WHERE open"))]


def all_job_ids(conn: Connection) -> list[str]:
    """Every job with events. A loose index scan: one index probe per job, not per event."""
    rows = conn.execute(
        text(
            """
            WITH RECURSIVE j(id) AS (
                SELECT min(job_id) FROM events
                UNION ALL
                SELECT (SELECT min(job_id) FROM events WHERE job_id > j.id)
                FROM j WHERE j.id IS NOT NULL
            )
            SELECT id FROM j WHERE id IS NOT NULL
            UNION SELECT job_id FROM jobs
            """
        )
    )
    return sorted(r[0] for r in rows)


def try_lock_jobs(conn: Connection, job_ids: Sequence[str]) -> list[str]:
    """Take the per-job transaction locks that are free; another aggregator holds the rest."""
    rows = conn.execute(
        text(
            "SELECT j, pg_try_advisory_xact_lock(:cls, hashtext(j))"
            " FROM unnest(CAST(:ids AS text[])) AS j ORDER BY j"
        ),
        {"cls": JOB_LOCK_CLASS, "ids": list(job_ids)},
    )
    return [job for job, locked in rows if locked]


def dirty_seqs(conn: Connection, job_ids: Sequence[str]) -> list[tuple[str, int]]:
    """The queue rows this pass consumes, read *before* the events.

    Every row visible now belongs to a committed batch whose events the next statement
    sees; rows committed later keep their jobs queued for the next pass.
    """
    rows = conn.execute(
        text("SELECT job_id, seq FROM dirty_jobs WHERE job_id = ANY(:ids)"),
        {"ids": list(job_ids)},
    )
    return [(r[0], r[1]) for r in rows]


_LOAD_EVENTS = """
    SELECT event_id::text, (extract(epoch FROM ts) * 1000000)::bigint, job_id, attempt,
           model, type, phase, gpus, team, rank, attrs
    FROM events WHERE job_id = ANY(%(ids)s) ORDER BY job_id, ts
"""


def load_events(conn: Connection, job_ids: Sequence[str]) -> dict[str, list[Event]]:
    # The hottest read of a pass: a plain psycopg cursor (no per-row SQLAlchemy Row) with
    # orjson for the attrs, in the caller's transaction (same DBAPI connection).
    raw = conn.connection.driver_connection
    with raw.cursor() as cur:  # type: ignore[union-attr]
        set_json_loads(orjson.loads, cur)
        cur.execute(_LOAD_EVENTS, {"ids": list(job_ids)})
        rows = cur.fetchall()
    out: dict[str, list[Event]] = defaultdict(list)
    for eid, ts_us, job_id, attempt, model, etype, phase, gpus, team, rank, attrs in rows:
        out[job_id].append(
            Event(eid, ts_us, job_id, attempt, model, etype, phase, gpus, team, rank, attrs or {})
        )
    return out


@dataclass
class Deltas:
    """Net change to the shared rollups from replacing a set of jobs."""

    fleet: dict[FleetKey, list[int]]
    totals: dict[TotalKey, int]

    @classmethod
    def empty(cls) -> Deltas:
        return cls(defaultdict(lambda: [0, 0]), defaultdict(int))


def subtract_previous(conn: Connection, job_ids: Sequence[str], deltas: Deltas) -> None:
    rows = conn.execute(
        text(
            """
            SELECT hour, model, team, component, phase, owner, settled_gpu_us, unsettled_gpu_us
            FROM rollup_hourly WHERE job_id = ANY(:ids)
            """
        ),
        {"ids": list(job_ids)},
    )
    for hour, model, team, component, phase, owner, settled, unsettled in rows:
        cell = deltas.fleet[(dt_to_us(hour), model, team, component, phase, owner)]
        cell[0] -= settled
        cell[1] -= unsettled
        deltas.totals[(model, team, component, owner)] -= settled


def delete_job_rows(conn: Connection, job_ids: Sequence[str]) -> None:
    params = {"ids": list(job_ids)}
    for table in ("rollup_hourly", "segments", "attempts", "jobs"):
        conn.execute(text(f"DELETE FROM {table} WHERE job_id = ANY(:ids)"), params)


def _bulk_insert(conn: Connection, table: str, columns: dict[str, str],
                 rows: list[tuple[Any, ...]]) -> None:
    """One INSERT per table: the rows travel as one JSON document (serialised by orjson, in
    C) and are unpacked by json_to_recordset. Binding an array per column spent most of
    the time in psycopg's pure-Python array dumpers (docs/performance.md)."""
    if not rows:
        return
    names = list(columns)
    payload = orjson.dumps([dict(zip(names, row, strict=True)) for row in rows])
    types = ", ".join(f"{n} {t}" for n, t in columns.items())
    conn.execute(
        text(
            f"INSERT INTO {table} ({', '.join(names)}) SELECT {', '.join(names)}"
            f" FROM json_to_recordset(CAST(:rows AS json)) AS u({types})"
        ),
        {"rows": payload.decode()},
    )


def insert_job_results(
    conn: Connection, computed: Sequence[tuple[str, JobComputation]], now: datetime,
    deltas: Deltas,
) -> None:
    """Insert the new rows of each job (old rows already deleted) and add to the deltas."""
    job_rows, attempt_rows, segment_rows, rollup_rows = [], [], [], []
    for job_id, comp in computed:
        res = comp.result
        model, team = res.model, res.team
        held = effective = at_risk = 0
        per_job: dict[tuple[int, str, str, str], list[int]] = defaultdict(lambda: [0, 0])
        for seq, (hour, piece) in enumerate(split_at_hours(comp.segments)):
            gpu_us = piece.gpu_us
            held += gpu_us
            if piece.component == "effective_training":
                effective += gpu_us
                if not piece.settled:
                    at_risk += gpu_us
            per_job[(hour, piece.component, piece.phase, piece.owner)][
                0 if piece.settled else 1
            ] += gpu_us
            segment_rows.append((
                job_id, seq, us_to_dt(hour), piece.attempt, us_to_dt(piece.start_us),
                us_to_dt(piece.end_us), piece.gpus, model, team, piece.component, piece.phase,
                piece.owner, piece.settled,
            ))
        for (hour, component, phase, owner), (settled, unsettled) in per_job.items():
            rollup_rows.append((job_id, us_to_dt(hour), model, team, component, phase, owner,
                                settled, unsettled))
            cell = deltas.fleet[(hour, model, team, component, phase, owner)]
            cell[0] += settled
            cell[1] += unsettled
            deltas.totals[(model, team, component, owner)] += settled
        for a in res.attempts:
            attempt_rows.append((
                job_id, a.attempt, us_to_dt(a.allocated_at_us),
                None if a.released_at_us is None else us_to_dt(a.released_at_us), a.gpus,
                a.end_cause, a.held_us / 1e6, a.startup_us / 1e6,
            ))
        first = min(a.allocated_at_us for a in res.attempts)
        last = max(a.released_at_us if a.released_at_us is not None else dt_to_us(now)
                   for a in res.attempts)
        first_attempt = res.attempts[0]
        tts_known = (first_attempt.released_at_us is not None
                     or first_attempt.startup_us < first_attempt.held_us)
        job_rows.append((
            job_id, model, team, res.state, us_to_dt(first), us_to_dt(last),
            res.state == "running", held / 1e6, effective / 1e6, at_risk / 1e6, res.level1.nof,
            res.level1.tts_us / 1e6 if tts_known else None,
            [t / 1e6 for t in res.level1.ttr_us], list(res.level1.ttr_causes),
            res.diagnostics.unknown_phase_events,
            res.to_wire(), now,
        ))
    _bulk_insert(conn, "jobs", {
        "job_id": "text", "model": "text", "team": "text", "state": "text",
        "first_at": "timestamptz", "last_at": "timestamptz", "open": "boolean",
        "held_gpu_seconds": "float8", "effective_gpu_seconds": "float8",
        "at_risk_gpu_seconds": "float8", "nof": "int", "tts_seconds": "float8",
        "ttr_seconds": "float8[]", "ttr_causes": "text[]", "unknown_phase_events": "int",
        "result": "jsonb",
        "computed_at": "timestamptz",
    }, job_rows)
    _bulk_insert(conn, "attempts", {
        "job_id": "text", "attempt": "int", "allocated_at": "timestamptz",
        "released_at": "timestamptz", "gpus": "int", "end_cause": "text",
        "held_seconds": "float8", "startup_seconds": "float8",
    }, attempt_rows)
    _bulk_insert(conn, "segments", {
        "job_id": "text", "seq": "int", "hour": "timestamptz", "attempt": "int",
        "start_at": "timestamptz", "end_at": "timestamptz", "gpus": "int", "model": "text",
        "team": "text", "component": "text", "phase": "text", "owner": "text",
        "settled": "boolean",
    }, segment_rows)
    _bulk_insert(conn, "rollup_hourly", {
        "job_id": "text", "hour": "timestamptz", "model": "text", "team": "text",
        "component": "text", "phase": "text", "owner": "text", "settled_gpu_us": "bigint",
        "unsettled_gpu_us": "bigint",
    }, rollup_rows)


def _bulk_add(conn: Connection, table: str, keys: dict[str, str], values: tuple[str, ...],
              rows: list[tuple[Any, ...]]) -> None:
    """Add `values` to the rows at `keys` (creating them), in key order.

    Two aggregators touching the same rows lock them in the same order, so they queue
    behind each other instead of deadlocking.
    """
    if not rows:
        return
    columns = {**keys, **dict.fromkeys(values, "bigint")}
    names = list(columns)
    payload = orjson.dumps([dict(zip(names, row, strict=True)) for row in sorted(rows)])
    key_list = ", ".join(keys)
    conn.execute(
        text(
            f"INSERT INTO {table} AS t ({', '.join(names)}) SELECT {', '.join(names)}"
            f" FROM json_to_recordset(CAST(:rows AS json))"
            f" AS u({', '.join(f'{n} {t}' for n, t in columns.items())}) ORDER BY {key_list}"
            f" ON CONFLICT ({key_list}) DO UPDATE SET "
            + ", ".join(f"{v} = t.{v} + EXCLUDED.{v}" for v in values)
        ),
        {"rows": payload.decode()},
    )


_LABELS = {"model": "text", "team": "text", "component": "text", "phase": "text",
           "owner": "text"}
_GPU_US = ("settled_gpu_us", "unsettled_gpu_us")
DAY_US = 24 * HOUR_US


def apply_deltas(conn: Connection, deltas: Deltas) -> None:
    """Add the net deltas of the replaced jobs to the shared rollups."""
    hourly: list[tuple[Any, ...]] = []
    daily: dict[tuple[Any, ...], list[int]] = defaultdict(lambda: [0, 0])
    for (hour, *labels), (settled, unsettled) in deltas.fleet.items():
        if settled or unsettled:
            hourly.append((us_to_dt(hour), *labels, settled, unsettled))
            cell = daily[(hour - hour % DAY_US, *labels)]
            cell[0] += settled
            cell[1] += unsettled
    _bulk_add(conn, "fleet_hourly", {"hour": "timestamptz", **_LABELS}, _GPU_US, hourly)
    _bulk_add(conn, "fleet_daily", {"day": "timestamptz", **_LABELS}, _GPU_US,
              [(us_to_dt(day), *labels, s, u) for (day, *labels), (s, u) in daily.items()
               if s or u])
    totals = [(*k, v) for k, v in deltas.totals.items() if v]
    _bulk_add(conn, "settled_totals",
              {"model": "text", "team": "text", "component": "text", "owner": "text"},
              ("settled_gpu_us",), totals)


def consume_dirty(conn: Connection, seqs: Sequence[int]) -> None:
    if seqs:
        conn.execute(text("DELETE FROM dirty_jobs WHERE seq = ANY(:s)"), {"s": list(seqs)})
