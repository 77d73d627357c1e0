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
from sqlalchemy import Engine, text

from service.access.auth import Authenticator
from service.errors import BadRequest, Forbidden, PayloadTooLarge, Unavailable, Unprocessable
from service.store.engine import db_unavailable
from service.store.events import store_rows
from service.store.ingest_pool import IngestPool
from service.wire.batch import validate_batch
from service.wire.whole import decide_whole

log = logging.getLogger(__name__)
WHOLE_MIN_BYTES = 1024


@dataclass(frozen=True)
class IngestLimits:
    max_body_bytes: int
    max_batch_events: int
    max_future_s: float
    max_age_s: float
    max_in_flight: int = 128
    max_in_flight_bytes: int = 64 * 1024 * 1024
    statement_timeout_ms: int = 10_000


class InFlightLimit:
    """Admission control: at most so many ingest requests and body bytes in one process.

    A burst beyond it gets 503 + Retry-After at once instead of queueing in memory. Only
    touched from the event loop's thread, so plain counters need no lock.
    """

    RETRY_AFTER_S = 1

    def __init__(self, max_requests: int, max_bytes: int) -> None:
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.requests = 0
        self.bytes = 0

    def admit(self) -> None:
        if self.requests >= self.max_requests:
            raise Unavailable(f"ingest is at its limit of {self.max_requests} concurrent"
                              " requests; retry later", retry_after_s=self.RETRY_AFTER_S)
        self.requests += 1

    def charge(self, n: int) -> None:
        if self.bytes + n > self.max_bytes:
            raise Unavailable(f"ingest is at its limit of {self.max_bytes} bytes of request"
                              " bodies in flight; retry later", retry_after_s=self.RETRY_AFTER_S)
        self.bytes += n

    def release(self, n_bytes: int) -> None:
        self.requests -= 1
        self.bytes -= n_bytes


@dataclass
class BatchOutcome:
    accepted: int
    duplicates: int
    rejected: list[dict[str, Any]]

    def to_wire(self) -> dict[str, Any]:
        return {"accepted": self.accepted, "duplicates": self.duplicates, "rejected": self.rejected}


async def read_limited_body(request: Request, limit: int,
                            charge: Callable[[int], None] | None = None) -> bytearray:
    """Read the body, refusing as soon as it passes `limit` (chunked bodies included).

    Chunks go into one growing buffer (no list of chunks joined into a second copy), and each
    is charged to `charge` (the in-flight byte budget) as it arrives.
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            declared_n = int(declared)
        except ValueError:
            raise BadRequest("Content-Length header is not a number") from None
        if declared_n > limit:
            raise PayloadTooLarge(f"body of {declared_n} bytes exceeds the limit of {limit} bytes")
    body = bytearray()
    async for chunk in request.stream():
        if len(body) + len(chunk) > limit:
            raise PayloadTooLarge(f"body exceeds the limit of {limit} bytes")
        if charge is not None:
            charge(len(chunk))
        body += chunk
    return body


def parse_batch(body: bytes | bytearray, max_events: int) -> list[Any]:
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


def store(engine: Engine, lines: list[str], jobs: set[str], statement_timeout_ms: int = 0) -> int:
    """Commit the events; return how many were new. Raise Unavailable if the DB is not there.

    Returns only after COMMIT succeeded, so a 202 never acknowledges what was not stored.
    `statement_timeout_ms` applies to this transaction only (`SET LOCAL`).
    """
    with db_unavailable("ingest"), engine.begin() as conn:
        if statement_timeout_ms:
            conn.execute(text(f"SET LOCAL statement_timeout = {int(statement_timeout_ms)}"))
        return store_rows(conn.connection.driver_connection, lines, jobs)


def build_router(
    engine: Engine,
    auth: Authenticator,
    limits: IngestLimits,
    clock: Callable[[], datetime],
    on_outcome: Callable[[BatchOutcome], None] | None = None,
    owner_of: Callable[[str], str | None] = lambda _model: None,
    pool: IngestPool | None = None,
) -> APIRouter:
    """The ingest route. With `pool` (what `ett serve` passes) batches are stored on the
    event loop; without it through `engine`, in a worker thread."""
    router = APIRouter()
    in_flight = InFlightLimit(limits.max_in_flight, limits.max_in_flight_bytes)

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
        in_flight.admit()
        charged = 0

        def charge(n: int) -> None:
            nonlocal charged
            in_flight.charge(n)
            charged += n

        try:
            body = await read_limited_body(request, limits.max_body_bytes, charge)
            now = clock()
            # A body of a few events costs the whole-batch path's fixed part more
            # than it saves (28 against 19 us for one event).
            batch = None if len(body) < WHOLE_MIN_BYTES else decide_whole(
                body, limits.max_batch_events, principal, now=now,
                max_future_s=limits.max_future_s, max_age_s=limits.max_age_s,
                owner_of=owner_of)
            if batch is None:  # some event needs deciding on its own (or the body is bad)
                batch = validate_batch(
                    parse_batch(body, limits.max_batch_events), principal, now=now,
                    max_future_s=limits.max_future_s, max_age_s=limits.max_age_s,
                    owner_of=owner_of)
            del body  # nothing keeps the body alive past validation
            if not batch.lines and batch.forbidden:
                raise Forbidden(_forbidden_summary(batch.forbidden))
            if pool is not None:
                inserted = await pool.store(batch.lines, batch.jobs)
            elif batch.lines:
                inserted = await run_in_threadpool(store, engine, batch.lines, batch.jobs,
                                                   limits.statement_timeout_ms)
            else:
                inserted = 0
        finally:
            in_flight.release(charged)
        outcome = BatchOutcome(
            accepted=inserted,
            duplicates=len(batch.lines) - inserted + batch.in_batch_duplicates,
            rejected=batch.rejected,
        )
        log.debug(
            "ingest batch: accepted=%d duplicates=%d rejected=%d token=%s",
            outcome.accepted, outcome.duplicates, len(batch.rejected), principal.token_id,
        )
        if on_outcome is not None:
            on_outcome(outcome)
        return Response(orjson.dumps(outcome.to_wire()), status_code=202,
                        media_type="application/json")

    return router


def _forbidden_summary(errors: list[str]) -> str:
    """403 detail for a batch with nothing this token may write: the distinct reasons."""
    distinct = list(dict.fromkeys(e.partition(": ")[2] for e in errors))
    more = f" (and {len(distinct) - 3} more)" if len(distinct) > 3 else ""
    return "nothing in this batch may be written with this token: " + "; ".join(distinct[:3]) + more


def utc_now() -> datetime:
    return datetime.now(UTC)
