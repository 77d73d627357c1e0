"""POST /v1/events: the v1 ingest endpoint (SPEC section 5)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from .auth import Authenticator, Principal
from .errors import BadRequest, Forbidden, PayloadTooLarge, Unavailable, Unprocessable
from .event_store import insert_events, mark_dirty
from .wire import WireError, WireEvent, validate_event

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IngestLimits:
    max_body_bytes: int
    max_batch_events: int
    max_future_s: float
    max_age_s: float


@dataclass
class BatchOutcome:
    accepted: int
    duplicates: int
    rejected: list[dict[str, Any]]

    def to_wire(self) -> dict[str, Any]:
        return {"accepted": self.accepted, "duplicates": self.duplicates, "rejected": self.rejected}


async def read_limited_body(request: Request, limit: int) -> bytes:
    """Read the body, refusing as soon as it passes `limit` (chunked bodies included)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            declared_n = int(declared)
        except ValueError:
            raise BadRequest("Content-Length header is not a number") from None
        if declared_n > limit:
            raise PayloadTooLarge(f"body of {declared_n} bytes exceeds the limit of {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def parse_batch(body: bytes, max_events: int) -> list[Any]:
    if not body:
        raise BadRequest("body is empty; send {\"events\": [...]}")
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise BadRequest("body must be a JSON object {\"events\": [...]}")
    if "events" not in doc:
        raise Unprocessable("events: is required")
    events = doc["events"]
    if not isinstance(events, list):
        raise Unprocessable("events: must be an array")
    if not events:
        raise Unprocessable("events: must hold at least 1 event")
    if len(events) > max_events:
        raise PayloadTooLarge(f"events: {len(events)} events exceed the limit of {max_events}")
    return events


def validate_batch(
    raw: list[Any], principal: Principal, limits: IngestLimits, now: datetime
) -> tuple[list[WireEvent], list[dict[str, Any]], int]:
    """Split a batch into storable events (first copy of each id) and rejections."""
    valid: list[WireEvent] = []
    rejected: list[dict[str, Any]] = []
    seen: set[str] = set()
    in_batch_duplicates = 0
    for index, obj in enumerate(raw):
        try:
            event = validate_event(
                obj, now=now, max_future_s=limits.max_future_s, max_age_s=limits.max_age_s
            )
        except WireError as exc:
            rejected.append({"index": index, "error": str(exc)})
            continue
        if not principal.may_write(event.model):
            rejected.append(
                {"index": index, "error": f"model: this token may not write model {event.model!r}"}
            )
            continue
        if event.event_id in seen:
            in_batch_duplicates += 1
            continue
        seen.add(event.event_id)
        valid.append(event)
    return valid, rejected, in_batch_duplicates


def store(engine: Engine, events: list[WireEvent]) -> int:
    """Commit the events; return how many were new. Raise Unavailable if the DB is not there."""
    try:
        with engine.begin() as conn:
            new_jobs = insert_events(conn, events)
            mark_dirty(conn, new_jobs)
    except PoolTimeout:
        raise Unavailable("database connection pool exhausted; retry later") from None
    except OperationalError as exc:
        log.warning("ingest: database unavailable: %s", exc.orig)
        raise Unavailable("database unavailable; retry later") from None
    except DBAPIError as exc:
        if exc.connection_invalidated:
            raise Unavailable("database connection lost; retry later") from None
        raise
    return len(new_jobs)


def build_router(
    engine: Engine,
    auth: Authenticator,
    limits: IngestLimits,
    clock: Callable[[], datetime],
    on_outcome: Callable[[BatchOutcome], None] | None = None,
) -> APIRouter:
    router = APIRouter()

    @router.post(
        "/v1/events",
        status_code=202,
        summary="Ingest a batch of 1 to 5000 events",
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Batch"}}},
            }
        },
    )
    async def post_events(request: Request) -> Response:
        principal = auth.authenticate(request.headers.get("authorization"))
        if principal.role == "reader":
            raise Forbidden("a reader token may not post events")
        body = await read_limited_body(request, limits.max_body_bytes)
        raw = parse_batch(body, limits.max_batch_events)
        valid, rejected, batch_dups = validate_batch(raw, principal, limits, clock())
        inserted = await run_in_threadpool(store, engine, valid) if valid else 0
        outcome = BatchOutcome(
            accepted=inserted,
            duplicates=len(valid) - inserted + batch_dups,
            rejected=rejected,
        )
        log.debug(
            "ingest batch: accepted=%d duplicates=%d rejected=%d token=%s",
            outcome.accepted, outcome.duplicates, len(rejected), principal.token_id,
        )
        if on_outcome is not None:
            on_outcome(outcome)
        return Response(orjson.dumps(outcome.to_wire()), status_code=202,
                        media_type="application/json")

    return router


def utc_now() -> datetime:
    return datetime.now(UTC)
