"""Answers over a window of the fleet rollups (docs/model.md, reading results): ETT by
scope, the models overview, a team's bill; and the window itself, as every surface names it.

Windows are exactly [start, end) (`store/queries.window_rows`). The answers are plain
dicts: the read API returns them, the CLI prints them, the console draws them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine

from ett_core.instants import us_to_seconds
from ett_core.taxonomy import COMPONENTS, UNREPORTED
from service.errors import Unprocessable
from service.store import queries as q
from service.wire.event import WireError, parse_rfc3339

from .empty_answers import bill_note, ett_note

GROUP_BY = ("none", "model", "team", "component", "owner")
MAX_WINDOW = timedelta(days=400)
EFFECTIVE = "effective_training"
# Every instant a window may name (docs/model.md, "Reading results"): RFC 3339 reaches year
# 1 and 9999, where a day's arithmetic (the default start, whole-day rollups) overflows
# datetime. No event can lie outside (the retention horizon), so nothing is lost.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)


def parse_window(start: str | None, end: str | None, now: datetime,
                 default: timedelta = timedelta(days=1)) -> tuple[datetime, datetime]:
    try:
        end_dt = _in_range(parse_rfc3339(end, "end"), "end") if end is not None else now
        start_dt = (_in_range(parse_rfc3339(start, "start"), "start") if start is not None
                    else max(EARLIEST, end_dt - default))
    except WireError as exc:
        raise Unprocessable(str(exc)) from None
    if end_dt <= start_dt:
        raise Unprocessable(f"end: must be after start ({start_dt.isoformat()})")
    if end_dt - start_dt > MAX_WINDOW:
        raise Unprocessable(f"window: at most {MAX_WINDOW.days} days")
    return start_dt, end_dt


def _in_range(instant: datetime, field: str) -> datetime:
    if not EARLIEST <= instant <= LATEST:
        raise WireError(f"{field}: {instant.isoformat()} is outside the supported range"
                        f" {EARLIEST.isoformat()} to {LATEST.isoformat()}")
    return instant


def summarise(rows: list[dict[str, Any]], key: str | None) -> dict[Any, dict[str, Any]]:
    groups: dict[Any, dict[str, Any]] = {}
    for row in rows:
        k = row[key] if key else None
        g = groups.setdefault(
            k, {"held": 0, "at_risk": 0, "unreported": 0,
                "components": dict.fromkeys(COMPONENTS, 0)}
        )
        total = row["settled"] + row["unsettled"]
        g["held"] += total
        if row.get("phase") == UNREPORTED:
            g["unreported"] += total
        g["components"][row["component"]] = g["components"].get(row["component"], 0) + total
        if row["component"] == EFFECTIVE:
            g["at_risk"] += row["unsettled"]
    return groups


def figure_groups(rows: list[dict[str, Any]], key: str | None) -> dict[Any, dict[str, Any]]:
    """`summarise` of the same window from its figures by model and team
    (`store/queries.window_figures`): integer sums, so regrouped exactly."""
    groups: dict[Any, dict[str, Any]] = {}
    for row in rows:
        k = row[key] if key else None
        g = groups.get(k)
        if g is None:
            g = groups[k] = {"held": 0, "at_risk": 0, "unreported": 0,
                             "components": dict.fromkeys(COMPONENTS, 0)}
        for component, gpu_us in row["components"].items():
            g["components"][component] += gpu_us
            g["held"] += gpu_us
        g["at_risk"] += row["at_risk"]
        g["unreported"] += row["unreported"]
    return groups


# Answers by model (grouped or filtered), grouped by these alone, are read from the model
# rollups; without a model, from the team rollups (`window_rows`), fewer rows still.
FIGURE_KEYS = ("model", "team")


def group_to_wire(key: Any, g: dict[str, Any] | None,
                  queue_seconds: float = 0.0) -> dict[str, Any]:
    g = g or {"held": 0, "at_risk": 0, "unreported": 0,
              "components": dict.fromkeys(COMPONENTS, 0)}
    held = g["held"]
    effective = g["components"].get(EFFECTIVE, 0)
    unreported = g.get("unreported", 0)
    return {
        "key": key,
        "held_gpu_seconds": us_to_seconds(held),
        "effective_gpu_seconds": us_to_seconds(effective),
        "at_risk_gpu_seconds": us_to_seconds(g["at_risk"]),
        "ett_ratio": effective / held if held else None,
        "components": {c: us_to_seconds(v) for c, v in g["components"].items()},
        # The scheduler's word (docs/model.md section 25): beside ETT, never inside it.
        "unreported_gpu_seconds": us_to_seconds(unreported),
        "unreported_ratio": unreported / held if held else None,
        "queue_seconds": queue_seconds,
    }


def ett_window(engine: Engine, start: datetime, end: datetime, group_by: str,
               model: str | None, team: str | None) -> dict[str, Any]:
    return ett_windows(engine, start, end, (group_by,), model, team)[group_by]


def ett_windows(engine: Engine, start: datetime, end: datetime, group_bys: Sequence[str],
                model: str | None, team: str | None, *, notes: bool = True
                ) -> dict[str, dict[str, Any]]:
    """`ett_window` for each of `group_bys`, from one read of the rollups grouped by all
    their keys at once (a page showing the fleet by team and by owner reads the window
    once, not once per grouping; integer sums regroup exactly). Without `notes`, an empty
    answer says nothing of why (what a page that shows only the figures skips reading:
    the note of a team that runs no models reads the owners of the whole horizon)."""
    keys = [g for g in dict.fromkeys(group_bys) if g != "none"]
    filters = {"model": model, "team": team}
    answers: dict[str, dict[str, Any]] = {}
    with engine.connect() as conn:
        if set(keys) <= set(FIGURE_KEYS) and ("model" in keys or model is not None):
            rows, regroup = q.window_figures(conn, start, end, keys, filters), figure_groups
        else:
            rows, regroup = q.window_rows(conn, start, end, [*keys, "phase"], filters), summarise
        said: list[str | None] = []  # what an empty window says, read once if needed
        for group_by in dict.fromkeys(group_bys):
            key = None if group_by == "none" else group_by
            groups = regroup(rows, key)
            note = None
            if notes and not any(g["held"] for g in groups.values()):
                if not said:
                    said.append(ett_note(conn, model, team, start, end))
                note = said[0]
            queue = (q.queue_window(conn, start, end, key, filters)
                     if key in (None, "model", "team") else {})
            if key is None:
                out = [group_to_wire(None, groups.get(None), queue.get(None, 0.0))]
            else:
                out = [group_to_wire(k, groups[k], queue.get(k, 0.0)) for k in sorted(groups)]
            answer = {"start": start.isoformat(), "end": end.isoformat(),
                      "group_by": group_by, "groups": out}
            answers[group_by] = answer if note is None else {**answer, "note": note}
    return answers


def models_overview(engine: Engine, now: datetime, team: str | None = None) -> dict[str, Any]:
    """Every model (only `team`'s models if given: the same rows, each still summing the
    model's time under every team, read for those models alone)."""
    day, week = now - timedelta(days=1), now - timedelta(days=7)
    with engine.connect() as conn:
        pairs = q.models_and_teams(conn, team)
        filters: q.Filters = {} if team is None else {"model": sorted({m for m, _ in pairs})}
        by_day = figure_groups(q.window_figures(conn, day, now, ["model"], filters), "model")
        by_week = figure_groups(q.window_figures(conn, week, now, ["model"], filters), "model")
        queue_week = q.queue_window(conn, week, now, "model", filters)
    models: list[dict[str, Any]] = []
    for model, team in pairs:
        d = group_to_wire(model, by_day.get(model))
        w = group_to_wire(model, by_week.get(model), queue_week.get(model, 0.0))
        models.append({
            "model": model, "team": team,
            "ett_ratio_1d": d["ett_ratio"], "ett_ratio_7d": w["ett_ratio"],
            "held_gpu_hours_1d": d["held_gpu_seconds"] / 3600,
            "held_gpu_hours_7d": w["held_gpu_seconds"] / 3600,
            "at_risk_gpu_hours_1d": d["at_risk_gpu_seconds"] / 3600,
            "unreported_ratio_7d": w["unreported_ratio"],
            "queue_seconds_7d": w["queue_seconds"],
        })
    answer: dict[str, Any] = {"as_of": now.isoformat(), "models": models}
    if not models:
        answer["note"] = "no jobs yet: nothing has been posted to POST /v1/events"
    return answer


def team_bill(engine: Engine, team: str, start: datetime, end: datetime) -> dict[str, Any]:
    """What `team` owns of the time that was not effective training, by phase and model."""
    with engine.connect() as conn:
        rows = q.window_rows(conn, start, end, ["phase", "model"], {"owner": team},
                             exclude_components=[EFFECTIVE])
        note = None if rows else bill_note(conn, team, start, end)
    by_phase: dict[str, float] = {}
    by_model: dict[str, float] = {}
    by_component: dict[str, float] = {}
    total = 0
    for row in rows:
        gpu_us = row["settled"] + row["unsettled"]
        total += gpu_us
        by_phase[row["phase"]] = by_phase.get(row["phase"], 0) + gpu_us
        by_component[row["component"]] = by_component.get(row["component"], 0) + gpu_us
        by_model[row["model"]] = by_model.get(row["model"], 0) + gpu_us
    hours = 3_600_000_000
    answer = {
        "team": team, "start": start.isoformat(), "end": end.isoformat(),
        "lost_gpu_hours": total / hours,
        "by_phase": {k: v / hours for k, v in sorted(by_phase.items(), key=lambda kv: -kv[1])},
        "by_model": {k: v / hours for k, v in sorted(by_model.items(), key=lambda kv: -kv[1])},
        "by_component": {k: v / hours
                         for k, v in sorted(by_component.items(), key=lambda kv: -kv[1])},
    }
    return answer if note is None else {**answer, "note": note}
