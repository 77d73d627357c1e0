"""Checkpoint advice read back: a model's (or every model's) attempts in a window, summed.

The sums come from `checkpoint_attempts` (written with each job's results; summed over the
attempts that started in the window by `store/queries.checkpoint_sums`); the formulas
are the core's (ett_core.checkpoint_advice). The answers are plain dicts, so the API,
the CLI and the console render the same thing. Never commits.
"""

from __future__ import annotations

from datetime import datetime
from fnmatch import fnmatchcase
from typing import Any

from sqlalchemy import Engine

from ett_core.checkpoint_advice import Observations, advise
from ett_core.instants import us_to_seconds
from service.store import queries as q


def _observations(row: Any, days: float) -> Observations:
    return Observations(
        window_days=days,
        held_seconds=us_to_seconds(float(row.held_us)),
        held_gpu_hours=us_to_seconds(float(row.held_gpu_us)) / 3600,
        interruptions=int(row.interruptions),
        blocking_save_seconds=us_to_seconds(float(row.blocking_save_us)),
        durable_checkpoints=int(row.durable_checkpoints),
        ttr_seconds=us_to_seconds(float(row.ttr_us)),
        lost_progress_seconds=us_to_seconds(float(row.lost_us)),
        observed_interval_seconds=(None if row.median_us is None
                                   else us_to_seconds(float(row.median_us))),
    )


def _empty(days: float) -> Observations:
    return Observations(days, 0.0, 0.0, 0, 0.0, 0, 0.0, 0.0, None)


def _rows(engine: Engine, start: datetime, end: datetime, model: str | None) -> list[Any]:
    with engine.connect() as conn:
        return q.checkpoint_sums(conn, start, end, model)


def _days(start: datetime, end: datetime) -> float:
    return (end - start).total_seconds() / 86400


def checkpoint_advice(engine: Engine, model: str, start: datetime, end: datetime
                      ) -> dict[str, Any]:
    """`GET /v1/models/{model}/checkpoint-advice`: always an answer, insufficient or not."""
    days = _days(start, end)
    rows = _rows(engine, start, end, model)
    obs = _observations(rows[0], days) if rows else _empty(days)
    return {"model": model, "start": start.isoformat(), "end": end.isoformat(),
            **advise(obs).to_wire()}


def fleet_checkpoint_advice(engine: Engine, start: datetime, end: datetime, *,
                            model_glob: str | None = None, team: str | None = None
                            ) -> list[dict[str, Any]]:
    """Every model with attempts in the window (its latest team beside it), largest projected
    saving first; models without a saving (no advice, or no comparison) last, by name."""
    days = _days(start, end)
    out = []
    for row in _rows(engine, start, end, None):
        if model_glob is not None and not fnmatchcase(row.model, model_glob):
            continue
        if team is not None and row.team != team:
            continue
        out.append({"model": row.model, "team": row.team, "start": start.isoformat(),
                    "end": end.isoformat(), **advise(_observations(row, days)).to_wire()})
    out.sort(key=lambda a: (a["projected_saving_gpu_hours_per_day"] is None,
                            -(a["projected_saving_gpu_hours_per_day"] or 0.0), a["model"]))
    return out
