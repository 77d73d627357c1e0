"""The shared rollups kept by delta: what replacing some jobs' results adds to the fleet's
label cells by hour, UTC day and UTC week, to the team and model rollups that sum them, and
to the settled totals.

A chunk's delta has two sources. The rows of jobs stored whole (`Deltas.inserted`) are
summed by the database from the `rollup_hourly` rows the chunk has just COPYed: on a
first recompute that is every cell, and summing them in Python to send each level as JSON
cost a sixth of Python's time (docs/performance.md, aggregation round 9). The
rest (the old rows of replaced jobs, the changed cells of a running job rewritten in part)
arrives as Python's signed sums per fleet cell.

Both are summed once per fleet cell into a temporary table, and every rollup is upserted
from it, in key order: two aggregators touching the same rows lock them in the same
order, so they queue behind each other instead of deadlocking. A cell is written when its
delta is not zero, at every level: a team or model row then exists exactly when one of the
fleet rows it sums does (a zero sum means one of them fell, so it existed), and a window
read from it lists the same groups as one read from the fleet's rows.

Never commits: `service.aggregate` owns each transaction.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson
from sqlalchemy import Connection

from ett_core.instants import us_to_dt
from ett_core.taxonomy import COMPONENTS, EFFECTIVE, UNREPORTED

from .tables import MODEL_FIGURES, TEAM_COLUMNS

FleetKey = tuple[int, str, str, str, str, str]  # hour_us, model, team, component, phase, owner
_LABELS = ("model", "team", "component", "phase", "owner")


@dataclass
class Deltas:
    """Net change to the shared rollups from replacing a set of jobs: signed sums per fleet
    cell, and the jobs whose `rollup_hourly` rows are all new in this transaction."""

    fleet: dict[FleetKey, list[int]] = field(default_factory=dict)
    inserted: list[str] = field(default_factory=list)

    @classmethod
    def empty(cls) -> Deltas:
        return cls()

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

_KEY = "hour, model, team, component, phase, owner"
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
_MODEL_SUMS = (*(f"coalesce(sum({_HELD}) FILTER (WHERE component = '{c}'), 0)"
                 for c in COMPONENTS),
               f"coalesce(sum(unsettled) FILTER (WHERE component = '{EFFECTIVE}'), 0)",
               f"coalesce(sum({_HELD}) FILTER (WHERE phase = '{UNREPORTED}'), 0)")


def _upsert(table: str, keys: dict[str, str], values: dict[str, str]) -> str:
    """Add the cells summed by `keys` (column: expression) into `table`'s `values`
    (column: sum), a row per group with any sum not zero, in key order."""
    names = ", ".join([*keys, *values])
    key_list = ", ".join(keys)
    selected = ", ".join(f"{expr} AS {col}" for col, expr in {**keys, **values}.items())
    nonzero = " OR ".join(f"{col} <> 0" for col in values)
    return (
        f"INSERT INTO {table} AS t ({names})"
        f" SELECT {names} FROM (SELECT {selected} FROM rollup_delta"
        f" GROUP BY {', '.join(keys.values())}) AS s WHERE {nonzero} ORDER BY {key_list}"
        f" ON CONFLICT ({key_list}) DO UPDATE SET "
        + ", ".join(f"{v} = t.{v} + EXCLUDED.{v}" for v in values)
    )


def _upserts() -> str:
    sums = {"settled_gpu_us": "sum(settled)", "unsettled_gpu_us": "sum(unsettled)"}
    statements = []
    for level, (column, bucket) in _BUCKETS.items():
        statements.append(_upsert(f"fleet_{level}", {column: bucket, **{k: k for k in _LABELS}},
                                  sums))
        if level != "weekly":  # a team's weeks are read as days: 7 x 100 rows
            statements.append(_upsert(f"team_{level}",
                                      {column: bucket, **{k: k for k in TEAM_COLUMNS}}, sums))
        statements.append(_upsert(f"model_{level}", {column: bucket, "model": "model",
                                                     "team": "team"},
                                  dict(zip(MODEL_FIGURES, _MODEL_SUMS, strict=True))))
    statements.append(_upsert("settled_totals", {k: k for k in ("model", "team", "component",
                                                                "owner")},
                              {"settled_gpu_us": "sum(settled)"}))
    statements.append("DELETE FROM rollup_delta")
    return ";\n".join(statements)


# One round trip: no parameters, so the statements go as one simple query, in order.
_APPLY = _upserts()


def apply_deltas(conn: Connection, deltas: Deltas) -> None:
    """Add the net deltas of the replaced jobs to the shared rollups."""
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
        cur.execute(_APPLY)
