"""Checkpoint advice (docs/checkpoints.md): a thin route over service.results.checkpoint_advice."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool

from service.access.callers import Reader
from service.errors import Unprocessable
from service.results.checkpoint_advice import checkpoint_advice
from service.results.windows import parse_window

from .answer_models import CheckpointAdvice
from .context import Context

DEFAULT_WINDOW = timedelta(days=30)
router = APIRouter(prefix="/v1")


@router.get("/models/{model}/checkpoint-advice", response_model=CheckpointAdvice,
            response_model_exclude_unset=True,
            summary="Observed and recommended checkpoint intervals for one model")
async def get_checkpoint_advice(model: str, _caller: Reader, ctx: Context,
                                start: str | None = None, end: str | None = None
                                ) -> dict[str, Any]:
    if "\x00" in model:  # PostgreSQL text cannot hold it: it can match nothing
        raise Unprocessable("model: must not contain the character U+0000")
    start_dt, end_dt = parse_window(start, end, ctx.clock(), default=DEFAULT_WINDOW)
    return await run_in_threadpool(checkpoint_advice, ctx.engine, model, start_dt, end_dt)
