"""Read endpoints (docs/model.md, reading results): thin routes over service.results.windows."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.concurrency import run_in_threadpool

from service.access.callers import Reader
from service.errors import NotFound, Unprocessable
from service.results.jobs import job_answer
from service.results.windows import GROUP_BY, ett_window, models_overview, parse_window, team_bill

from .answer_models import EttWindow, JobDocument, ModelsOverview, TeamBill
from .context import Context
from .query_params import reject_unknown


def _storable(**params: str | None) -> None:
    """PostgreSQL text cannot hold U+0000: such a parameter can match nothing, and sending it
    would fail the query (a 500, found by tests/api/test_schemathesis.py)."""
    for name, value in params.items():
        if value is not None and "\x00" in value:
            raise Unprocessable(f"{name}: must not contain the character U+0000")


router = APIRouter(prefix="/v1", dependencies=[Depends(reject_unknown)])


# `:path`: a job_id may hold `/` (the wire contract allows it), sent as is or as %2F.
@router.get("/jobs/{job_id:path}", response_model=JobDocument,
            response_model_exclude_unset=True,
            summary="One job's result: attempts, components, owners, Level 1")
async def get_job(job_id: str, _caller: Reader, ctx: Context) -> dict[str, Any]:
    _storable(job_id=job_id)
    result, pending = await run_in_threadpool(job_answer, ctx.engine, job_id)
    if result is None:
        if pending:
            raise NotFound(f"job {job_id!r} has events but no result yet: the aggregator has"
                           " not run since they arrived (POST /v1/aggregate runs a pass)")
        raise NotFound(f"job {job_id!r} is unknown")
    return result


@router.get("/ett", response_model=EttWindow, response_model_exclude_unset=True,
            summary="GPU-weighted ETT over [start, end)")
async def get_ett(_caller: Reader, ctx: Context, start: str | None = None,
                  end: str | None = None, model: str | None = None, team: str | None = None,
                  group_by: str = "none") -> dict[str, Any]:
    _storable(model=model, team=team)
    if group_by not in GROUP_BY:
        raise Unprocessable(f"group_by: must be one of {', '.join(GROUP_BY)}")
    start_dt, end_dt = parse_window(start, end, ctx.clock())
    return await run_in_threadpool(ett_window, ctx.engine, start_dt, end_dt, group_by, model,
                                   team)


@router.get("/models", response_model=ModelsOverview, response_model_exclude_unset=True,
            summary="Every model: team, last-day and last-week ETT, GPU-hours")
async def get_models(_caller: Reader, ctx: Context) -> dict[str, Any]:
    return await run_in_threadpool(models_overview, ctx.engine, ctx.clock())


@router.get("/teams/{team}/bill", response_model=TeamBill, response_model_exclude_unset=True,
            summary="A team's lost GPU-hours by phase, by model and by component")
async def get_bill(team: str, _caller: Reader, ctx: Context, start: str | None = None,
                   end: str | None = None) -> dict[str, Any]:
    _storable(team=team)
    start_dt, end_dt = parse_window(start, end, ctx.clock(), default=timedelta(days=7))
    return await run_in_threadpool(team_bill, ctx.engine, team, start_dt, end_dt)
