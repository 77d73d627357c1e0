"""Checkpoint advice (docs/checkpoints.md): a thin router over service.results.checkpoint_advice."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from sqlalchemy import Engine

from service.access.auth import Authenticator
from service.errors import Unprocessable
from service.results.checkpoint_advice import checkpoint_advice
from service.results.windows import parse_window

DEFAULT_WINDOW = timedelta(days=30)


def build_router(engine: Engine, auth: Authenticator,
                 clock: Callable[[], datetime]) -> APIRouter:
    router = APIRouter(prefix="/v1")

    @router.get("/models/{model}/checkpoint-advice",
                summary="Observed and recommended checkpoint intervals for one model")
    async def get_checkpoint_advice(model: str, request: Request, start: str | None = None,
                                    end: str | None = None) -> dict[str, Any]:
        auth.require_reader(request.headers.get("authorization"))
        if "\x00" in model:  # PostgreSQL text cannot hold it: it can match nothing
            raise Unprocessable("model: must not contain the character U+0000")
        start_dt, end_dt = parse_window(start, end, clock(), default=DEFAULT_WINDOW)
        return await run_in_threadpool(checkpoint_advice, engine, model, start_dt, end_dt)

    return router
