"""The console's pages as a registry: each page is a path, a template and a function that
returns the template's figures from the answers of `service.results` the API returns.

Adding a page is one builder and one template, then one `Page` in `PAGES`. The
checkpoint-advice panel and page show the plain dicts of `service.results.checkpoint_advice`, and
the impact page those of `service.results.impact` (console/impact.py), unchanged, so
their figures are the endpoints' and the CLI's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from service.errors import NotFound, Unprocessable
from service.results.checkpoint_advice import checkpoint_advice, fleet_checkpoint_advice
from service.results.jobs import job_timeline, model_jobs
from service.results.series import ett_series
from service.results.slo_burn import team_burns
from service.results.windows import ett_windows, models_overview, team_bill
from service.slo.load import load_slo_spec
from service.slo.model import SloSpec

from .impact import impact_figures
from .timeline import COLOURS, layout

WINDOWS = {"1d": timedelta(days=1), "7d": timedelta(days=7), "30d": timedelta(days=30)}
DEFAULT_WINDOW = "7d"


@dataclass(frozen=True)
class PageRequest:
    engine: Engine
    now: datetime
    path: Mapping[str, str]
    query: Mapping[str, str]
    slo_spec: Path | None


@dataclass(frozen=True)
class Page:
    name: str
    path: str  # under /ui, FastAPI path syntax
    template: str
    build: Callable[[PageRequest], dict[str, Any]]
    nav: bool = False  # listed in the header (pages without parameters)


def _window(req: PageRequest, default: str = DEFAULT_WINDOW
            ) -> tuple[str, datetime, datetime, str]:
    """The selected window ending now; hourly points up to a week, daily beyond."""
    name = req.query.get("window", default)
    if name not in WINDOWS:
        raise Unprocessable(f"window: must be one of {', '.join(WINDOWS)}")
    span = WINDOWS[name]
    return name, req.now - span, req.now, "hour" if span <= timedelta(days=7) else "day"


def _series(engine: Engine, start: datetime, end: datetime, step: str,
            **filters: str | None) -> dict[str, Any]:
    """The chart data of `service.results.series`, in the timeline's colours."""
    series = ett_series(engine, start, end, step, **filters)
    return {**series, "colours": COLOURS}


@functools.lru_cache(maxsize=4)
def _parsed_slo_spec(path: Path, mtime_ns: int, size: int) -> SloSpec:
    return load_slo_spec(path)


def _slo_spec(path: Path) -> SloSpec:
    """The SLO file, parsed again only when it changes: parsing its YAML took a team page
    50-150 ms of its 300 (docs/performance.md, round 3)."""
    stat = path.stat()
    return _parsed_slo_spec(path, stat.st_mtime_ns, stat.st_size)


def fleet(req: PageRequest) -> dict[str, Any]:
    name, start, end, step = _window(req)
    answers = ett_windows(req.engine, start, end, ("none", "team", "owner"), None, None)
    total = answers["none"]["groups"][0]
    teams = answers["team"]["groups"]
    owners = answers["owner"]["groups"]
    for owner in owners:
        owner["lost_gpu_seconds"] = owner["held_gpu_seconds"] - owner["effective_gpu_seconds"]
    owners.sort(key=lambda g: -g["lost_gpu_seconds"])
    return {"window": name, "windows": list(WINDOWS), "start": start, "end": end,
            "total": total, "teams": teams, "owners": owners,
            "series": _series(req.engine, start, end, step)}


def team(req: PageRequest) -> dict[str, Any]:
    name, start, end, step = _window(req)
    team_name = req.path["team"]
    models = models_overview(req.engine, req.now, team_name)["models"]
    bill = team_bill(req.engine, team_name, start, end)
    slos: list[dict[str, Any]] = []
    slo_note = None
    if req.slo_spec is not None and req.slo_spec.is_file():
        slos = [b.to_dict() for b in team_burns(req.engine, _slo_spec(req.slo_spec),
                                                 team_name, req.now)]
    else:
        slo_note = f"no SLO file at {req.slo_spec} (ETT_SLO_FILE)"
    if not models and not bill["by_phase"] and not slos:
        raise NotFound(f"team {team_name!r} has no models, owns no lost time in this window"
                       " and owns no SLO")
    totals = ett_windows(req.engine, start, end, ("none",), None, team_name,
                         notes=False)["none"]["groups"][0]
    return {"team": team_name, "window": name, "windows": list(WINDOWS), "start": start,
            "end": end, "models": models, "bill": bill, "slos": slos, "slo_note": slo_note,
            "total": totals, "series": _series(req.engine, start, end, step, team=team_name)}


def model(req: PageRequest) -> dict[str, Any]:
    name, start, end, step = _window(req)
    model_name = req.path["model"]
    recent, level1 = model_jobs(req.engine, model_name, start)
    if not recent:
        raise NotFound(f"model {model_name!r} has no jobs")
    total = ett_windows(req.engine, start, end, ("none",), model_name, None,
                        notes=False)["none"]["groups"][0]
    return {"model": model_name, "team": recent[0]["team"], "window": name,
            "windows": list(WINDOWS), "start": start, "end": end, "total": total,
            "level1": level1, "jobs": recent,
            "advice": checkpoint_advice(req.engine, model_name, start, end),
            "series": _series(req.engine, start, end, step, model=model_name)}


def checkpoints(req: PageRequest) -> dict[str, Any]:
    """Every model's checkpoint advice, largest projected saving first. The default window
    is the endpoint's (30 days): a week rarely holds enough interruptions per model."""
    name, start, end, _step = _window(req, default="30d")
    team_name = req.query.get("team") or None
    every = fleet_checkpoint_advice(req.engine, start, end)
    # One read serves both the team choices and the list: the function's own team filter
    # is this same comparison with each model's latest team.
    teams = sorted({a["team"] for a in every})
    shown = [a for a in every if team_name is None or a["team"] == team_name]
    saving = sum(a["projected_saving_gpu_hours_per_day"] or 0.0 for a in shown)
    return {"window": name, "windows": list(WINDOWS), "start": start, "end": end,
            "team": team_name, "teams": teams, "advice": shown,
            "advised": sum(a["status"] == "ok" for a in shown), "saving": saving}


def job(req: PageRequest) -> dict[str, Any]:
    job_id = req.path["job_id"]
    result, segments, marks = job_timeline(req.engine, job_id)
    return {"job": result, "timeline": layout(result["attempts"], segments, marks)}


def impact(req: PageRequest) -> dict[str, Any]:
    return impact_figures(req.engine, req.now, req.query, WINDOWS)


PAGES: tuple[Page, ...] = (
    Page("Fleet", "/", "fleet.html", fleet, nav=True),
    Page("Team", "/teams/{team}", "team.html", team),
    Page("Model", "/models/{model}", "model.html", model),
    Page("Job", "/jobs/{job_id}", "job.html", job),
    Page("Checkpoint advice", "/checkpoints", "checkpoint_advice.html", checkpoints, nav=True),
    Page("Impact", "/impact", "impact.html", impact, nav=True),
)
