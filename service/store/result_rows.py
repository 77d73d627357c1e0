"""A job's computation as the rows stored for it, formatted as COPY text.

Rows go in by COPY, the cheapest way in on both sides (JSON documents unpacked by
json_to_recordset cost more; docs/performance.md). Job ids are names validated at ingest (no
tab, newline or backslash); labels can come from the taxonomy file, so they are escaped.

The per-attempt checkpoint facts (`checkpoint_attempts`) go in the same way, with the job's
other rows, so the facts advice reads always belong to the results the rest of the service
shows; for a job whose stored facts a pass knows (it wrote them), only the attempts whose
facts changed are rewritten, a running attempt's sums in place (`replace_checkpoint_facts`).

Keeping a job's rows as values (`JobRows`) also lets a pass compare them with what it
wrote for the job last time and rewrite only what changed (`store.results.update_jobs`).

The rollups every job's rows add to (the fleet's, the teams', the models', the settled
totals) move by the delta of the rows a pass replaces (`Deltas`, `apply_deltas`); in a
recompute of everything, the team rollups once, at its end (`drain_pending`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from sqlalchemy import Connection, text

from ett_core import JobComputation, JobResult, Segment
from ett_core.checkpoints import AttemptCheckpoints
from ett_core.instants import us_to_dt
from ett_core.rollup import split_at_hours
from ett_core.taxonomy import COMPONENTS, EFFECTIVE, UNREPORTED

from . import copy_text as fmt
from .state import RECOMPUTE_LOCK
from .tables import MODEL_FIGURES, TEAM_COLUMNS

# hour_us, component, phase, owner
RollupKey = tuple[int, str, str, str]


@dataclass(frozen=True)
class JobRows:
    job_id: str
    model: str
    team: str
    running: bool
    job_line: str
    attempt_lines: dict[int, str]
    segment_lines: list[str]  # index = seq
    rollup: dict[RollupKey, tuple[int, int]]  # (settled, unsettled) GPU-microseconds
    # The first `stable[0]` segments, which the next resumed computation repeats
    # (ett_core.resume): their line count and held, effective and at-risk GPU-us.
    stable: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)
    # The checkpoint facts stored with these rows (table `checkpoint_attempts`).
    checkpoints: tuple[AttemptCheckpoints, ...] = ()
    # Rows made from other rows (a resumed job's): those rows, the lines they share
    # at least, and the rollup cells that may differ.
    since: tuple[JobRows, int, frozenset[RollupKey]] | None = field(
        default=None, compare=False, repr=False)


class RowFormatter:
    """Formats jobs computed at one `now`; caches timestamp and label text across jobs."""

    def __init__(self, now_us: int) -> None:
        self.ts = fmt.Timestamps()
        self.now_us = now_us
        self.now_text = self.ts(now_us)
        self._labels: dict[str, str] = {}
        self._triples: dict[tuple[str, str, str], str] = {}

    def label(self, value: str) -> str:
        out = self._labels.get(value)
        if out is None:
            out = self._labels[value] = fmt.text(value)
        return out

    def rollup_line(self, rows: JobRows, key: RollupKey) -> str:
        hour, component, phase, owner = key
        settled, unsettled = rows.rollup[key]
        label = self.label
        return (f"{rows.job_id}\t{self.ts(hour)}\t{label(rows.model)}\t{label(rows.team)}\t"
                f"{self.labels(component, phase, owner)}\t{settled}\t{unsettled}\n")

    def labels(self, component: str, phase: str, owner: str) -> str:
        """The three attribution fields of a row, tab-separated (one lookup per piece)."""
        key = (component, phase, owner)
        out = self._triples.get(key)
        if out is None:
            out = self._triples[key] = "\t".join(self.label(v) for v in key)
        return out

    def job_rows(self, job_id: str, comp: JobComputation, stable: int = 0,
                 previous: tuple[JobRows, tuple[Segment, ...]] | None = None) -> JobRows:
        """The job's rows. `stable`: how many leading segments the next computation will
        repeat; `previous`: the rows and segments of the computation this one resumed,
        whose first `stable` segments this one repeats: their lines are kept as they are."""
        ts, labels = self.ts, self.labels
        res = comp.result
        model_text, team_text = self.label(res.model), self.label(res.team)
        segments = comp.segments
        keep = 0
        if previous is not None:
            old, old_segments = previous
            keep = old.stable[0]
            if not (0 < keep <= min(stable, len(segments), len(old_segments))
                    and segments[keep - 1] == old_segments[keep - 1]
                    and old.model == res.model and old.team == res.team):
                keep = 0
        touched: set[RollupKey] = set()
        rollup: dict[RollupKey, list[int]] = {}
        if keep:
            _, seq, held, effective, at_risk = old.stable
            segment_lines = old.segment_lines[:seq]
            for hour, piece in split_at_hours(old_segments[keep:]):
                key = (hour, piece.component, piece.phase, piece.owner)
                cell = rollup.get(key)
                if cell is None:
                    cell = rollup[key] = list(old.rollup[key])
                cell[0 if piece.settled else 1] -= piece.gpu_us
            touched.update(rollup)
        else:
            seq = held = effective = at_risk = 0
            segment_lines = []
        marks = (0, 0, 0, 0, 0)
        # Pieces mostly follow each other: a piece's start is the previous piece's end.
        last_end, last_end_text = None, ""
        for index in range(keep, len(segments) + 1):
            if index == stable:
                marks = (stable, seq, held, effective, at_risk)
            if index == len(segments):
                break
            for hour, piece in split_at_hours(segments[index:index + 1]):
                attempt, start, end, gpus, component, phase, owner, settled = piece
                gpu_us = (end - start) * gpus
                held += gpu_us
                if component == "effective_training":
                    effective += gpu_us
                    if not settled:
                        at_risk += gpu_us
                key = (hour, component, phase, owner)
                cell = rollup.get(key)
                if cell is None:
                    cell = rollup[key] = (list(old.rollup.get(key, (0, 0))) if keep
                                          else [0, 0])
                    if keep:
                        touched.add(key)
                cell[0 if settled else 1] += gpu_us
                start_text = last_end_text if start == last_end else ts(start)
                last_end, last_end_text = end, ts(end)
                segment_lines.append(
                    f"{job_id}\t{seq}\t{ts(hour)}\t{attempt}\t{start_text}\t{last_end_text}\t"
                    f"{gpus}\t{model_text}\t{team_text}\t{labels(component, phase, owner)}\t"
                    f"{'t' if settled else 'f'}\n")
                seq += 1
        attempt_lines = {
            a.attempt: (f"{job_id}\t{a.attempt}\t{ts(a.allocated_at_us)}\t"
                        f"{ts(a.released_at_us)}\t{a.gpus}\t{fmt.text(a.end_cause)}\t"
                        f"{a.held_us / 1e6!r}\t{a.startup_us / 1e6!r}\n")
            for a in res.attempts}
        first = min(a.allocated_at_us for a in res.attempts)
        last = max(a.released_at_us if a.released_at_us is not None else self.now_us
                   for a in res.attempts)
        first_attempt = res.attempts[0]
        tts_known = (first_attempt.released_at_us is not None
                     or first_attempt.startup_us < first_attempt.held_us)
        level1 = res.level1
        running = res.state == "running"
        job_line = (
            f"{job_id}\t{model_text}\t{team_text}\t{fmt.text(res.state)}\t{ts(first)}\t"
            f"{ts(last)}\t{fmt.boolean(running)}\t{held / 1e6!r}\t{effective / 1e6!r}\t"
            f"{at_risk / 1e6!r}\t{level1.nof}\t"
            f"{repr(level1.tts_us / 1e6) if tts_known else fmt.NULL}\t"
            f"{fmt.float_array(t / 1e6 for t in level1.ttr_us)}\t"
            f"{fmt.text_array(level1.ttr_causes)}\t{res.diagnostics.unknown_phase_events}\t"
            f"{fmt.json_text(orjson.dumps(res.to_wire()).decode())}\t{self.now_text}\n")
        if keep:
            cells = dict(old.rollup)
            for key, cell in rollup.items():
                if cell[0] or cell[1]:
                    cells[key] = (cell[0], cell[1])
                else:  # no piece is left in it (every piece holds GPU time)
                    cells.pop(key, None)
            return JobRows(job_id, res.model, res.team, running, job_line, attempt_lines,
                           segment_lines, cells, marks, comp.checkpoints,
                           (old, old.stable[1], frozenset(touched)))
        return JobRows(job_id, res.model, res.team, running, job_line, attempt_lines,
                       segment_lines, {k: (v[0], v[1]) for k, v in rollup.items()}, marks,
                       comp.checkpoints)


CHECKPOINT_COLUMNS = ("job_id", "attempt", "model", "team", "started_at", "gpus", "held_us",
                      "interrupted", "blocking_save_us", "durable_checkpoints", "intervals_us",
                      "lost_progress_us", "ttr_us")


def checkpoint_lines(job_id: str, named: JobResult | JobRows,
                     facts: Sequence[AttemptCheckpoints], ts: fmt.Timestamps) -> list[str]:
    """Per-attempt checkpoint facts (table `checkpoint_attempts`) of the job `named` (its
    model and team) as COPY lines."""
    head = f"{fmt.text(job_id)}\t"
    labels = f"{fmt.text(named.model)}\t{fmt.text(named.team)}\t"
    return [
        f"{head}{c.attempt}\t{labels}{ts(c.start_us)}\t{c.gpus}\t{c.held_us}\t"
        f"{fmt.boolean(c.interrupted)}\t{c.blocking_save_us}\t{c.durable_checkpoints}\t"
        f"{{{','.join(map(str, c.intervals_us))}}}\t{c.lost_progress_us}\t{fmt.opt(c.ttr_us)}\n"
        for c in facts
    ]


def replace_checkpoint_facts(conn: Connection, job_ids: Sequence[str],
                             computed: Mapping[str, JobComputation],
                             pairs: Sequence[tuple[JobRows, JobRows]] = ()) -> None:
    """Replace the checkpoint facts of `job_ids` by those of `computed` (a job absent from
    it keeps none), and for each (old, new) of `pairs` (the rows stored now, and the next)
    rewrite only the attempts whose facts changed."""
    ts = fmt.Timestamps()
    lines = [line for job_id in job_ids if (comp := computed.get(job_id)) is not None
             for line in checkpoint_lines(job_id, comp.result, comp.checkpoints, ts)]
    gone: tuple[list[str], list[int]] = ([], [])
    sums: dict[str, list[Any]] = {c: [] for c in _CHECKPOINT_SUMS}
    for old, new in pairs:
        before = {c.attempt: c for c in old.checkpoints}
        moved = (old.model, old.team) != (new.model, new.team)
        for now in new.checkpoints:
            was = before.pop(now.attempt, None)
            if was == now:
                continue
            if not moved and was is not None and was.intervals_us == now.intervals_us and (
                    was.start_us, was.gpus) == (now.start_us, now.gpus):
                # A running attempt's sums grow every pass; its intervals (one number per
                # checkpoint: long for an old job) stay in place.
                for column, values in sums.items():
                    values.append(new.job_id if column == "job_id" else getattr(now, column))
                continue
            if was is not None:
                gone[0].append(new.job_id)
                gone[1].append(now.attempt)
            lines.extend(checkpoint_lines(new.job_id, new, (now,), ts))
        for attempt in before:
            gone[0].append(new.job_id)
            gone[1].append(attempt)
    if job_ids:
        conn.execute(text("DELETE FROM checkpoint_attempts WHERE job_id = ANY(:ids)"),
                     {"ids": list(job_ids)})
    if gone[0]:
        conn.execute(text(
            "DELETE FROM checkpoint_attempts c USING unnest(CAST(:jobs AS text[]),"
            " CAST(:nums AS int[])) AS d(job_id, attempt)"
            " WHERE c.job_id = d.job_id AND c.attempt = d.attempt"),
            {"jobs": gone[0], "nums": gone[1]})
    if sums["job_id"]:
        conn.execute(text(_UPDATE_CHECKPOINT_SUMS), sums)
    if lines:
        raw = conn.connection.driver_connection
        with raw.cursor() as cur:  # type: ignore[union-attr]
            fmt.copy_rows(cur, "checkpoint_attempts", CHECKPOINT_COLUMNS, lines)


_CHECKPOINT_SUMS = {"job_id": "text", "attempt": "int", "held_us": "bigint",
                    "interrupted": "boolean", "blocking_save_us": "bigint",
                    "durable_checkpoints": "int", "lost_progress_us": "bigint",
                    "ttr_us": "bigint"}
_UPDATE_CHECKPOINT_SUMS = (
    "UPDATE checkpoint_attempts c SET "
    + ", ".join(f"{n} = u.{n}" for n in list(_CHECKPOINT_SUMS)[2:])
    + " FROM unnest(" + ", ".join(f"CAST(:{n} AS {t}[])" for n, t in _CHECKPOINT_SUMS.items())
    + f") AS u({', '.join(_CHECKPOINT_SUMS)})"
    " WHERE c.job_id = u.job_id AND c.attempt = u.attempt")


# --- the shared rollups kept by delta ----------------------------------------------------
# What replacing some jobs' rows adds to the fleet's label cells by hour, UTC day and UTC
# week, to the team and model rollups that sum them, and to the settled totals.
#
# A chunk's delta has two sources. The rows of jobs stored whole (`Deltas.inserted`) are
# summed by the database from the `rollup_hourly` rows the chunk has just COPYed: on a
# first recompute that is every cell, and summing them in Python to send each level as JSON
# cost a sixth of Python's time (docs/performance.md, aggregation round 9). The
# rest (the old rows of replaced jobs, the changed cells of a running job rewritten in part)
# arrives as Python's signed sums per fleet cell.
#
# Both are summed once per fleet cell into a temporary table, and every rollup is upserted
# from it, in key order: two aggregators touching the same rows lock them in the same
# order, so they queue behind each other instead of deadlocking. A cell is written when its
# delta is not zero, at every level: a team or model row then exists exactly when one of the
# fleet rows it sums does (a zero sum means one of them fell, so it existed), and a window
# read from it lists the same groups as one read from the fleet's rows.

FleetKey = tuple[int, str, str, str, str, str]  # hour_us, model, team, component, phase, owner
_LABELS = ("model", "team", "component", "phase", "owner")


@dataclass
class Deltas:
    """Net change to the shared rollups from replacing a set of jobs: signed sums per fleet
    cell, and the jobs whose `rollup_hourly` rows are all new in this transaction."""

    fleet: dict[FleetKey, list[int]] = field(default_factory=dict)
    inserted: list[str] = field(default_factory=list)

    def add(self, hour_us: int, model: str, team: str, component: str, phase: str,
            owner: str, settled: int, unsettled: int) -> None:
        """Add GPU-microseconds (negative to take away) to one fleet cell."""
        key = (hour_us, model, team, component, phase, owner)
        cell = self.fleet.get(key)
        if cell is None:
            self.fleet[key] = [settled, unsettled]
        else:
            cell[0] += settled
            cell[1] += unsettled


# Rows are deleted at each commit; a chunk stored one job at a time (after its batch
# failed) applies several deltas in one transaction, so each application empties it too.
_CELLS = """
    CREATE TEMPORARY TABLE IF NOT EXISTS rollup_delta (
        hour timestamptz NOT NULL, model text NOT NULL, team text NOT NULL,
        component text NOT NULL, phase text NOT NULL, owner text NOT NULL,
        settled numeric NOT NULL, unsettled numeric NOT NULL
    ) ON COMMIT DELETE ROWS"""

_KEY = ", ".join(("hour", *_LABELS))
# The sums as NUMERIC, sent as decimal strings: a chunk's delta for one model-day can pass
# 2^64, beyond what JSON numbers carry exactly (and what orjson writes).
_FILL = f"""
    INSERT INTO rollup_delta
    SELECT {_KEY}, sum(settled), sum(unsettled) FROM (
        SELECT {_KEY}, settled_gpu_us AS settled, unsettled_gpu_us AS unsettled
        FROM rollup_hourly WHERE job_id = ANY(%(inserted)s)
        UNION ALL
        SELECT {_KEY}, settled, unsettled FROM json_to_recordset(%(cells)s::json)
            AS d(hour timestamptz, model text, team text, component text, phase text,
                 owner text, settled numeric, unsettled numeric)
    ) AS c
    GROUP BY {_KEY}
    HAVING sum(settled) <> 0 OR sum(unsettled) <> 0"""

# Each level's bucket from the hour: UTC days, and weeks from Monday (1970-01-05 was one).
_BUCKETS = {
    "hourly": ("hour", "hour"),
    "daily": ("day", "date_bin('1 day', hour, TIMESTAMPTZ '1970-01-01 00:00:00+00')"),
    "weekly": ("week", "date_bin('7 days', hour, TIMESTAMPTZ '1970-01-05 00:00:00+00')"),
}
_HELD = "settled + unsettled"
_SUMS = {"settled_gpu_us": "sum(settled)", "unsettled_gpu_us": "sum(unsettled)"}
_MODEL_SUMS = (*(f"coalesce(sum({_HELD}) FILTER (WHERE component = '{c}'), 0)"
                 for c in COMPONENTS),
               f"coalesce(sum(unsettled) FILTER (WHERE component = '{EFFECTIVE}'), 0)",
               f"coalesce(sum({_HELD}) FILTER (WHERE phase = '{UNREPORTED}'), 0)")


def _upsert(table: str, keys: dict[str, str], values: dict[str, str], *,
            grouped: bool = True, source: str = "rollup_delta") -> str:
    """Add the cells of `source` summed by `keys` (column: expression) into `table`'s
    `values` (column: sum), a row per group with any sum not zero, in key order. Not
    `grouped`: the fleet's hours, one row each in `rollup_delta` already (`values` its
    columns)."""
    names = ", ".join([*keys, *values])
    key_list = ", ".join(keys)
    selected = ", ".join(f"{expr} AS {col}" for col, expr in {**keys, **values}.items())
    nonzero = " OR ".join(f"{col} <> 0" for col in values)
    group = f" GROUP BY {', '.join(keys.values())}" if grouped else ""
    return (
        f"INSERT INTO {table} AS t ({names})"
        f" SELECT {names} FROM (SELECT {selected} FROM {source}{group}) AS s"
        f" WHERE {nonzero} ORDER BY {key_list}"
        f" ON CONFLICT ({key_list}) DO UPDATE SET "
        + ", ".join(f"{v} = t.{v} + EXCLUDED.{v}" for v in values)
    )


def _team_keys(column: str, bucket: str) -> dict[str, str]:
    return {column: bucket, **{k: k for k in TEAM_COLUMNS}}


_TEAM_LEVELS = ("hourly", "daily")  # a team's weeks are read as days: 7 x 100 rows
_TEAM_KEY = ", ".join(_team_keys(*_BUCKETS["hourly"]))
# A recompute's chunk notes its delta of the team rollups (docs below) instead of adding it.
_HOLD_TEAMS = (f"INSERT INTO team_pending SELECT {_TEAM_KEY}, sum(settled), sum(unsettled)"
               f" FROM rollup_delta GROUP BY {_TEAM_KEY}")


def _upserts(held: bool) -> str:
    """The statements that add `rollup_delta` to every shared rollup; `held`: the team
    rollups' part noted in `team_pending` instead."""
    statements = []
    for level, (column, bucket) in _BUCKETS.items():
        hourly = level == "hourly"
        statements.append(_upsert(f"fleet_{level}", {column: bucket, **{k: k for k in _LABELS}},
                                  {"settled_gpu_us": "settled", "unsettled_gpu_us": "unsettled"}
                                  if hourly else _SUMS, grouped=not hourly))
        if held and hourly:  # noted once, by hour: the end sums the days from it too
            statements.append(_HOLD_TEAMS)
        elif level in _TEAM_LEVELS and not held:
            statements.append(_upsert(f"team_{level}", _team_keys(column, bucket), _SUMS))
        statements.append(_upsert(f"model_{level}", {column: bucket, "model": "model",
                                                     "team": "team"},
                                  dict(zip(MODEL_FIGURES, _MODEL_SUMS, strict=True))))
    statements.append(_upsert("settled_totals", {k: k for k in ("model", "team", "component",
                                                                "owner")},
                              {"settled_gpu_us": "sum(settled)"}))
    statements.append("DELETE FROM rollup_delta")
    return ";\n".join(statements)


# One round trip: no parameters, so the statements go as one simple query, in order.
_APPLY = _upserts(held=False)
_APPLY_HOLDING_TEAMS = _upserts(held=True)


def apply_deltas(conn: Connection, deltas: Deltas, *, hold_teams: bool = False) -> None:
    """Add the net deltas of the replaced jobs to the shared rollups; `hold_teams`: the
    team rollups' part held back in `team_pending`, for `drain_pending` (a recompute of
    everything)."""
    cells = [{"hour": us_to_dt(hour), **dict(zip(_LABELS, labels, strict=True)),
              "settled": str(settled), "unsettled": str(unsettled)}
             for (hour, *labels), (settled, unsettled) in deltas.fleet.items()
             if settled or unsettled]
    if not cells and not deltas.inserted:
        return
    with conn.connection.driver_connection.cursor() as cur:  # type: ignore[union-attr]
        cur.execute(_CELLS)
        cur.execute(_FILL, {"inserted": deltas.inserted,
                            "cells": orjson.dumps(cells).decode()})
        cur.execute(_APPLY_HOLDING_TEAMS if hold_teams else _APPLY)


# --- the team rollups' deltas held back by a recompute of everything ---------------------
# A recompute of everything (service/aggregation/recompute.py) replaces every job's rows
# chunk by chunk, and a chunk is about one model's jobs. Added per chunk, the deltas upsert
# a team-hour once for each model of the team that ran in it: 7.8M upserts for 410k
# `team_hourly` rows at 180 days, a sixth of the server's statement time (docs/
# performance.md, aggregation round 10). The chunks note them in `team_pending` instead,
# and the recompute sums them into the team rollups once, when it ends.
#
# Deltas commute, so adding them late is exact whatever ran in between: a live aggregator
# replacing a job the recompute has stored adds its own delta, from the recompute's rows,
# straight away. Until the end, the team rollups show the teams as they were before the
# recompute (plus what live passes changed). The recompute holds `state.RECOMPUTE_LOCK`
# while it holds deltas back; a pass that finds deltas pending and the lock free adds them (a
# recompute stopped before its end, `drain_stopped`).

# In the order every writer adds to them (`_APPLY`): hours, then days, each in key order.
_DRAIN = ";\n".join([
    # Rows appended from now on wait for this transaction: none is emptied unsummed.
    "LOCK TABLE team_pending IN SHARE ROW EXCLUSIVE MODE",
    *(_upsert(f"team_{level}", _team_keys(*_BUCKETS[level]), _SUMS, source="team_pending")
      for level in _TEAM_LEVELS),
    # Emptied in place (no dead rows): each pass's look for pending rows stays cheap.
    "TRUNCATE team_pending",
])


def drain_pending(conn: Connection) -> None:
    """Add every held-back delta to the team rollups and empty `team_pending`, in the
    caller's transaction (begun: the statements go on its driver connection)."""
    with conn.connection.driver_connection.cursor() as cur:  # type: ignore[union-attr]
        cur.execute(_DRAIN)


def drain_stopped(conn: Connection) -> bool:
    """Add the deltas a recompute of everything held back and did not add because it
    stopped first (none while one runs: it holds `state.RECOMPUTE_LOCK`); whether there
    were any."""
    free = conn.execute(text(
        "SELECT CASE WHEN EXISTS (SELECT 1 FROM team_pending)"
        " THEN pg_try_advisory_xact_lock(:k) ELSE false END"), {"k": RECOMPUTE_LOCK}).scalar_one()
    if free:
        drain_pending(conn)
    return bool(free)
