"""Read endpoints (docs/model.md, reading results): thin routers over service.results.windows."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from sqlalchemy import Engine

from service.access.auth import Authenticator
from service.errors import NotFound, Unprocessable
from service.results.jobs import job_answer
from service.results.windows import GROUP_BY, ett_window, models_overview, parse_window, team_bill

from .query_params import reject_unknown


def _storable(**params: str | None) -> None:
    """PostgreSQL text cannot hold U+0000: such a parameter can match nothing, and sending it
    would fail the query (a 500, found by tests/api/test_schemathesis.py)."""
    for name, value in params.items():
        if value is not None and "\x00" in value:
            raise Unprocessable(f"{name}: must not contain the character U+0000")


def build_router(engine: Engine, auth: Authenticator,
                 clock: Callable[[], datetime]) -> APIRouter:
    router = APIRouter(prefix="/v1", dependencies=[Depends(reject_unknown)])

    # `:path`: a job_id may hold `/` (the wire contract allows it), sent as is or as %2F.
    @router.get("/jobs/{job_id:path}",
                summary="One job's result: attempts, components, owners, Level 1")
    async def get_job(job_id: str, request: Request) -> dict[str, Any]:
        auth.require_reader(request.headers.get("authorization"))
        _storable(job_id=job_id)

        result, pending = await run_in_threadpool(job_answer, engine, job_id)
        if result is None:
            if pending:
                raise NotFound(f"job {job_id!r} has events but no result yet: the aggregator has"
                               " not run since they arrived (POST /v1/aggregate runs a pass)")
            raise NotFound(f"job {job_id!r} is unknown")
        return result

    @router.get("/ett", summary="GPU-weighted ETT over [start, end)")
    async def get_ett(request: Request, start: str | None = None, end: str | None = None,
                      model: str | None = None, team: str | None = None,
                      group_by: str = "none") -> dict[str, Any]:
        auth.require_reader(request.headers.get("authorization"))
        _storable(model=model, team=team)
        if group_by not in GROUP_BY:
            raise Unprocessable(f"group_by: must be one of {', '.join(GROUP_BY)}")
        start_dt, end_dt = parse_window(start, end, clock())
        return await run_in_threadpool(ett_window, engine, start_dt, end_dt, group_by, model,
                                       team)

    @router.get("/models", summary="Every model: team, last-day and last-week ETT, GPU-hours")
    async def get_models(request: Request) -> dict[str, Any]:
        auth.require_reader(request.headers.get("authorization"))
        return await run_in_threadpool(models_overview, engine, clock())

    @router.get("/teams/{team}/bill",
                summary="A team's lost GPU-hours by phase, by model and by component")
    async def get_bill(team: str, request: Request, start: str | None = None,
                       end: str | None = None) -> dict[str, Any]:
        auth.require_reader(request.headers.get("authorization"))
        _storable(team=team)
        start_dt, end_dt = parse_window(start, end, clock(), default=timedelta(days=7))
        return await run_in_threadpool(team_bill, engine, team, start_dt, end_dt)

    return router
