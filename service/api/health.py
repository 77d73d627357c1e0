"""Probes: /healthz (process up) and /readyz (database reachable, migrations at head)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from service.store.engine import ping
from service.store.migrate import current_revision, head_revision

from .answer_models import Health, Readiness
from .context import Context


def _readiness(engine: Engine) -> tuple[bool, dict[str, object]]:
    head = head_revision()
    try:
        with engine.connect() as conn:
            ping(conn)
            current = current_revision(conn)
    except SQLAlchemyError as exc:
        return False, {"database": "unreachable", "error": str(exc.__class__.__name__)}
    ok = current == head
    return ok, {
        "database": "ok",
        "migration": current,
        "head": head,
        **({} if ok else {"error": "migrations are not at head; run `ett migrate`"}),
    }


router = APIRouter()


@router.get("/healthz", response_model=Health, summary="The process is up")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="Database reachable and migrations at head",
            responses={200: {"model": Readiness}, 503: {"model": Readiness}})
async def readyz(ctx: Context) -> JSONResponse:
    ok, detail = await run_in_threadpool(_readiness, ctx.engine)
    return JSONResponse({"status": "ready" if ok else "not ready", **detail},
                        status_code=200 if ok else 503)
