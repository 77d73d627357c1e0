"""Admin endpoints: POST /v1/aggregate runs one aggregation pass and returns when done;
GET /v1/admin/quarantine lists the jobs the aggregator holds out (and why)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from fastapi.concurrency import run_in_threadpool

from service.access.callers import Admin
from service.aggregate import Aggregator
from service.errors import NotFound
from service.results import quarantine

from .answer_models import PassAnswer, Quarantine
from .context import Context
from .query_params import reject_unknown

# Mounted only when the context has an aggregator (service/api/app.py).
router = APIRouter(prefix="/v1", dependencies=[Depends(reject_unknown)])


async def aggregator_of(ctx: Context) -> Aggregator:
    if ctx.aggregator is None:  # not reached: the router is mounted only with one
        raise NotFound("this process runs no aggregator")
    return ctx.aggregator


TheAggregator = Annotated[Aggregator, Depends(aggregator_of)]


@router.post("/aggregate", response_model=PassAnswer,
             summary="Run one aggregation pass now (admin)")
async def post_aggregate(_caller: Admin, aggregator: TheAggregator) -> dict[str, Any]:
    report = await run_in_threadpool(aggregator.run_pass)
    return report.to_wire()


@router.get("/admin/quarantine", response_model=Quarantine,
            summary="Jobs held out of aggregation, with their errors")
async def get_quarantine(_caller: Admin, aggregator: TheAggregator) -> dict[str, Any]:
    return await run_in_threadpool(quarantine.quarantine_report, aggregator.engine)
