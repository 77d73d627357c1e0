"""Admin endpoints: POST /v1/aggregate runs one aggregation pass and returns when done;
GET /v1/admin/quarantine lists the jobs the aggregator holds out (and why)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool

from service.access.auth import Authenticator
from service.aggregate import Aggregator
from service.results import quarantine

from .query_params import reject_unknown


def build_router(aggregator: Aggregator, auth: Authenticator) -> APIRouter:
    router = APIRouter(prefix="/v1", dependencies=[Depends(reject_unknown)])

    @router.post("/aggregate", summary="Run one aggregation pass now (admin)")
    async def post_aggregate(request: Request) -> dict[str, Any]:
        auth.require_admin(request.headers.get("authorization"))
        report = await run_in_threadpool(aggregator.run_pass)
        return report.to_wire()

    @router.get("/admin/quarantine", summary="Jobs held out of aggregation, with their errors")
    async def get_quarantine(request: Request) -> dict[str, Any]:
        auth.require_admin(request.headers.get("authorization"))
        return await run_in_threadpool(quarantine.quarantine_report, aggregator.engine)

    return router
