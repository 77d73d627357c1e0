"""ETT over time for the console's charts: GPU-microseconds per step (hour or UTC day) and
component, read from the fleet rollups the aggregator maintains by deltas.

Steps are whole hours (or days) of the rollup, not clipped to the window: a chart's point
is the figure of its whole step, and the last one is the current step so far.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

FILTERS = ("model", "team", "owner")
STEPS = {"hour": ("fleet_hourly", "hour"), "day": ("fleet_daily", "day")}


def component_series(conn: Connection, start: datetime, end: datetime, step: str,
                     filters: dict[str, str | None] | None = None) -> list[dict[str, Any]]:
    """Rows of (at, component, held, unsettled) GPU-microseconds, steps in [start, end)."""
    if step not in STEPS:
        raise ValueError(f"step: must be one of {', '.join(STEPS)}")
    table, column = STEPS[step]
    clauses, params = [], {"start": start, "end": end}
    for name, value in (filters or {}).items():
        if name not in FILTERS:
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
