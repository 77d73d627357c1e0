"""ETT over time for the console's charts: GPU-hours per step (hour or UTC day) and
component, and ETT per step, from the fleet rollups the aggregator maintains by deltas.

Steps are whole hours (or days) of the rollup, not clipped to the window: a chart's point
is the figure of its whole step, and the last one is the current step so far.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine

from ett_core.instants import us_to_seconds
from ett_core.taxonomy import COMPONENTS
from service.store import queries as q

HOUR_S = 3600.0


def ett_series(engine: Engine, start: datetime, end: datetime, step: str,
               **filters: str | None) -> dict[str, Any]:
    """Chart data: epoch seconds, ETT per step, GPU-hours per component per step, and the
    window the x-axis spans (not only the data's), with where the step still in progress
    begins (its figures grow until it ends, so the charts mark it as partial)."""
    first = q.floor_hour(start) if step == "hour" else q.floor_day(start)
    current = q.floor_hour(end) if step == "hour" else q.floor_day(end)
    with engine.connect() as conn:
        rows = q.component_series(conn, first, end, step, filters)
    # Every step of the window, zero where nothing was held: a quiet stretch is drawn flat
    # (and the ETT line broken there), not bridged by a line between the steps around it.
    stride = timedelta(hours=1) if step == "hour" else timedelta(days=1)
    steps: dict[datetime, dict[str, int]] = {}
    at = first
    while at < end:
        steps[at] = dict.fromkeys(COMPONENTS, 0)
        at += stride
    for row in rows:
        steps.setdefault(row["at"], dict.fromkeys(COMPONENTS, 0))[row["component"]] += row["held"]
    xs = sorted(steps)
    ett = []
    for at in xs:
        held = sum(steps[at].values())
        ett.append(steps[at]["effective_training"] / held if held else None)
    return {"x": [int(at.timestamp()) for at in xs], "ett": ett,
            "components": {c: [us_to_seconds(steps[at][c]) / HOUR_S for at in xs]
                           for c in COMPONENTS},
            "start": int(start.timestamp()), "end": int(end.timestamp()),
            "partial_from": int(current.timestamp()) if current < end else None,
            "step": step, "empty": not rows}
