"""POST /v1/events: the v1 ingest endpoint (docs/model.md section 5)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response

from service.access.auth import Principal
from service.access.callers import SpanWriter, writer_of
from service.errors import BadRequest, Forbidden, PayloadTooLarge, Unavailable, Unprocessable
from service.fair_queue import FairQueue
from service.loop_lag import LoopLag
from service.settings import Settings
from service.store.ingest_pool import IngestPool
from service.wire import otlp
from service.wire.batch import ValidatedBatch, validate_batch
from service.wire.body import Receive, json_object, receive_body
from service.wire.deadlines import BodyDeadlines
from service.wire.job_claims import ClaimCache, JobClaimsCheck
from service.wire.span_mapping import SpanMapping
from service.wire.spans import SpanEvents, events_of
from service.wire.whole import decide_whole
from service.work_pool import WorkPool

log = logging.getLogger(__name__)
WHOLE_MIN_BYTES = 1024
# A body up to this size (about a dozen events) is decided on the event loop: ~0.05 ms,
# less than the hop to a worker process and back costs, and a fleet's small writers never
# wait for the worker queue (whose bound then holds only larger bodies).
INLINE_MAX_BYTES = 2048


@dataclass(frozen=True)
class IngestLimits:
    """The ingest settings (service/settings.py holds their defaults and meanings)."""

    max_body_bytes: int
    max_batch_events: int
    max_future_s: float
    max_age_s: float
    max_in_flight: int
    # The ingest window: older events only through an admin token (the backfill path).
    ingest_max_age_s: float
    max_in_flight_bytes: int
    max_in_flight_per_token: int
    body_deadline_s: float
    # The fair queue across tokens: held while the loop is this late, or the group commits
    # this much slower than their recent best, at most this long.
    fair_lag_s: float
    fair_store_lag_s: float
    fair_max_wait_s: float
    # The work budget of one OTLP request, counted before any span is mapped.
    max_spans: int
    max_attributes: int
    # Decoding and validation run in this many processes, with this many requests waiting.
    work_processes: int
    work_queue: int

    @classmethod
    def from_settings(cls, s: Settings) -> IngestLimits:
        return cls(
            max_body_bytes=s.max_body_bytes,
            max_batch_events=s.max_batch_events,
            max_future_s=s.max_future_skew_s,
            max_age_s=s.max_event_age_days * 86400,
            ingest_max_age_s=s.ingest_max_age.total_seconds(),
            max_in_flight=s.ingest_max_in_flight,
            max_in_flight_bytes=s.ingest_max_in_flight_bytes,
            max_in_flight_per_token=s.ingest_max_in_flight_per_token,
            body_deadline_s=s.ingest_body_deadline_s,
            fair_lag_s=s.ingest_fair_lag_ms / 1000,
            fair_store_lag_s=s.ingest_fair_store_lag_ms / 1000,
            fair_max_wait_s=s.ingest_fair_max_wait_ms / 1000,
            max_spans=s.otlp_max_spans,
            max_attributes=s.otlp_max_attributes,
            work_processes=s.work_processes,
            work_queue=s.work_queue,
        )


class InFlightLimit:
    """Admission control: at most so many ingest requests and body bytes in one process,
    and at most `per_token` of the requests for any one token.

    A burst beyond it gets 503 + Retry-After at once instead of queueing in memory. The
    per-token share keeps one writer's slow or idle connections (each held at most the
    body deadline) from taking every slot: 130 stalled sockets of one token once answered
    every other writer, admin included, 503. Only touched from the event loop's thread, so
    plain counters need no lock.
    """

    RETRY_AFTER_S = 1

    def __init__(self, max_requests: int, max_bytes: int, per_token: int | None = None
                 ) -> None:
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.per_token = per_token or max_requests
        self.requests = 0
        self.bytes = 0
        self.by_token: dict[str, int] = {}

    def admit(self, token: str = "") -> None:
        if self.requests >= self.max_requests:
            raise Unavailable(f"ingest is at its limit of {self.max_requests} concurrent"
                              " requests; retry later", retry_after_s=self.RETRY_AFTER_S)
        held = self.by_token.get(token, 0)
        if held >= self.per_token:
            raise Unavailable(f"this token is at its limit of {self.per_token} concurrent"
                              " ingest requests; retry later", retry_after_s=self.RETRY_AFTER_S)
        self.requests += 1
        self.by_token[token] = held + 1

    def charge(self, n: int) -> None:
        if self.bytes + n > self.max_bytes:
            raise Unavailable(f"ingest is at its limit of {self.max_bytes} bytes of request"
                              " bodies in flight; retry later", retry_after_s=self.RETRY_AFTER_S)
        self.bytes += n

    def release(self, n_bytes: int, token: str = "") -> None:
        self.requests -= 1
        self.bytes -= n_bytes
        left = self.by_token[token] - 1
        if left:
            self.by_token[token] = left
        else:
            del self.by_token[token]

    def admitted(self, token: str) -> Admitted:
        """One slot of `token`, held for a `with` block, whose value is the byte charger;
        the bytes it charged are given back with the slot."""
        self.admit(token)
        return Admitted(self, token)


class Admitted:
    """A slot of `InFlightLimit` (a class, not a generator: this is every request's path)."""

    __slots__ = ("_limit", "_token", "charged")

    def __init__(self, limit: InFlightLimit, token: str) -> None:
        self._limit, self._token, self.charged = limit, token, 0

    def __enter__(self) -> Callable[[int], None]:
        return self.charge

    def charge(self, n: int) -> None:
        self._limit.charge(n)
        self.charged += n

    def __exit__(self, *_exc: object) -> None:
        self._limit.release(self.charged, self._token)


def age_limit(limits: IngestLimits, principal: Principal) -> tuple[float, bool]:
    """How old an event this caller may send, in seconds, and whether that is the ingest
    window (a writer) rather than the retention horizon (an admin backfilling)."""
    if principal.is_admin:
        return limits.max_age_s, False
    return min(limits.ingest_max_age_s, limits.max_age_s), True


@dataclass
class BatchOutcome:
    accepted: int
    duplicates: int
    rejected: list[dict[str, Any]]
    # Events stored in their team's own job because another team claimed the id first.
    moved: list[dict[str, Any]] | None = None

    def to_wire(self) -> dict[str, Any]:
        wire = {"accepted": self.accepted, "duplicates": self.duplicates,
                "rejected": self.rejected}
        if self.moved:
            wire["moved"] = self.moved
        return wire


def parse_batch(body: bytes | bytearray, max_events: int) -> list[Any]:
    if not body:
        raise BadRequest("body is empty; send {\"events\": [...]}")
    doc = json_object(body, '{"events": [...]}')
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


@dataclass(frozen=True)
class Deciding:
    """What deciding a body takes besides the body, its caller and the time: plain data,
    sent with each body to a worker process."""

    limits: IngestLimits
    mapping: SpanMapping
    owner_of: Callable[[str], str | None]


def decide_events(body: bytes | bytearray, principal: Principal, now: datetime,
                  deciding: Deciding) -> ValidatedBatch:
    """A `/v1/events` body's events, each stored, rejected or forbidden."""
    limits = deciding.limits
    max_age_s, window = age_limit(limits, principal)
    # A body of a few events costs the whole-batch path's fixed part more
    # than it saves (28 against 19 us for one event).
    batch = None if len(body) < WHOLE_MIN_BYTES else decide_whole(
        body, limits.max_batch_events, principal, now=now,
        max_future_s=limits.max_future_s, max_age_s=max_age_s,
        owner_of=deciding.owner_of)
    if batch is None:  # some event needs deciding on its own (or the body is bad)
        batch = validate_batch(
            parse_batch(body, limits.max_batch_events), principal, now=now,
            max_future_s=limits.max_future_s, max_age_s=max_age_s,
            owner_of=deciding.owner_of, window=window)
    return batch


def decide_spans(body: bytes | bytearray, media: str, principal: Principal, now: datetime,
                 deciding: Deciding) -> tuple[SpanEvents, ValidatedBatch]:
    """A `/v1/traces` body's spans, mapped to events, and those events decided."""
    limits = deciding.limits
    request = otlp.parse_request(body, media)
    otlp.check_budget(request, limits.max_spans, limits.max_attributes)
    mapped = events_of(otlp.spans_of(request), deciding.mapping)
    if len(mapped.events) > limits.max_batch_events:
        raise PayloadTooLarge(f"the spans make {len(mapped.events)} events, more than"
                              f" the limit of {limits.max_batch_events}; send fewer"
                              " spans per request")
    max_age_s, window = age_limit(limits, principal)
    batch = validate_batch([event for _, event in mapped.events], principal, now=now,
                           max_future_s=limits.max_future_s, max_age_s=max_age_s,
                           owner_of=deciding.owner_of, window=window)
    if not len(batch.rows) and batch.forbidden:
        raise Forbidden(_forbidden_summary(batch.forbidden))
    return mapped, batch


class Ingestion:
    """What the ingest routes share in one process: the limits, admission control, the
    claims already committed, the decoding processes, and the pool batches are stored
    through, on the event loop."""

    def __init__(
        self,
        pool: IngestPool,
        limits: IngestLimits,
        clock: Callable[[], datetime],
        *,
        on_outcome: Callable[[BatchOutcome], None] | None = None,
        owner_of: Callable[[str], str | None] = lambda _model: None,
        span_mapping: SpanMapping | None = None,
    ) -> None:
        self.pool = pool
        self.limits = limits
        self.clock = clock
        self.on_outcome = on_outcome
        self.owner_of = owner_of
        self.deciding = Deciding(limits, span_mapping or SpanMapping(), owner_of)
        self.in_flight = InFlightLimit(limits.max_in_flight, limits.max_in_flight_bytes,
                                       limits.max_in_flight_per_token)
        self.claims = ClaimCache()
        self.deadlines = BodyDeadlines(limits.body_deadline_s)
        self.fair = FairQueue(self.behind, max_wait_s=limits.fair_max_wait_s,
                              clock=time.monotonic)
        self.loop_lag = LoopLag(on_tick=self.fair.tick)
        self.work = WorkPool(limits.work_processes, limits.work_queue, processes=True,
                             preload=(__name__,))

    def behind(self) -> bool:
        """Whether the process is behind, so that a greedy token waits its turn: its event
        loop runs `fair_lag_s` late, or its group commits take `fair_store_lag_s` longer
        than their recent best (`service.store_lag`); either 0 leaves its signal out."""
        limits = self.limits
        return (0 < limits.fair_lag_s <= self.loop_lag.lag_s
                or 0 < limits.fair_store_lag_s <= self.pool.store_lag.behind_s)

    def turn(self, token: str) -> Awaitable[None] | None:
        """None when `token`'s request may go to work now (the usual answer, given without
        a coroutine), else its turn to await (`service.fair_queue`)."""
        self.loop_lag.follow(asyncio.get_running_loop())
        turn = self.fair.enter(token)
        return None if turn is None else self.fair.wait(token, turn)

    async def stored(self, batch: ValidatedBatch, team: str | None
                     ) -> tuple[int, JobClaimsCheck]:
        """Store a validated batch: how many of its events were new, and the job-claims
        check that kept, moved or rejected each event (`kept`, `moved`, `rejected`)."""
        check = JobClaimsCheck(batch, team)
        cached = check.from_cache(self.claims)
        if cached is None:
            inserted = await self.pool.store(batch.rows, check, team)
        else:
            inserted = await self.pool.store(cached)
        self.claims.learn(check.seen)  # committed: store returns only after COMMIT
        return inserted, check

    def report(self, outcome: BatchOutcome, principal_id: str, route: str) -> None:
        log.debug("%s batch: accepted=%d duplicates=%d rejected=%d token=%s", route,
                  outcome.accepted, outcome.duplicates, len(outcome.rejected), principal_id)
        if self.on_outcome is not None:
            self.on_outcome(outcome)


def ingestion(request: Request) -> Ingestion:
    """The app's ingest flow (`app.state.ingestion`, set by `create_app`). Read from the
    request rather than as a dependency: these two routes are the hot path."""
    return request.app.state.ingestion


router = APIRouter()
event_writer = writer_of("events")


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
    # The caller checked inline, as the dependency would: nothing for FastAPI to solve.
    # `service.api.events_route` serves this route ahead of FastAPI, by the same steps.
    principal = await event_writer(request)
    answer = await take_events(ingestion(request), principal, request.scope["headers"],
                               request.receive)
    return Response(answer, status_code=202, media_type="application/json")


async def take_events(flow: Ingestion, principal: Principal,
                      headers: Iterable[tuple[bytes, bytes]], receive: Receive) -> bytes:
    """A `POST /v1/events` request of a writer: admitted, read, decided and stored; the
    202 answer's JSON."""
    limits = flow.limits
    token = principal.token_id or ""
    with flow.in_flight.admitted(token) as charge:
        if (turn := flow.turn(token)) is not None:
            await turn
        body = await receive_body(headers, receive, limit=limits.max_body_bytes,
                                  deadlines=flow.deadlines, charge=charge)
        if len(body) <= INLINE_MAX_BYTES:
            batch = decide_events(body, principal, flow.clock(), flow.deciding)
        else:
            batch = await flow.work.run(decide_events, body, principal, flow.clock(),
                                        flow.deciding)
        del body  # nothing keeps the body alive past validation
        if not len(batch.rows) and batch.forbidden:
            raise Forbidden(_forbidden_summary(batch.forbidden))
        inserted, checked = await flow.stored(batch, principal.team)
    outcome = BatchOutcome(
        accepted=inserted,
        duplicates=checked.kept - inserted + batch.in_batch_duplicates,
        rejected=sorted(batch.rejected + checked.rejected, key=lambda r: r["index"]),
        moved=checked.moved,
    )
    flow.report(outcome, principal.token_id, "ingest")
    return orjson.dumps(outcome.to_wire())


@router.post(
    "/v1/traces",
    summary="Ingest OTLP/HTTP trace spans (protobuf or JSON) as events",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {otlp.PROTOBUF: {"schema": {"type": "string", "format": "binary"}},
                        otlp.JSON: {"schema": {"type": "object"}}},
        }
    },
)
async def post_traces(request: Request, principal: SpanWriter) -> Response:
    flow = ingestion(request)
    media = otlp.media_type_of(request.headers.get("content-type"))
    token = principal.token_id or ""
    with flow.in_flight.admitted(token) as charge:
        if (turn := flow.turn(token)) is not None:
            await turn
        body = await receive_body(request.scope["headers"], request.receive,
                                  limit=flow.limits.max_body_bytes, deadlines=flow.deadlines,
                                  media_types=(otlp.PROTOBUF, otlp.JSON), charge=charge)
        mapped, batch = await flow.work.run(decide_spans, body, media, principal,
                                            flow.clock(), flow.deciding)
        del body
        inserted, checked = await flow.stored(batch, principal.team)
    # A span is rejected when any of its events is: its other events may be stored,
    # and a corrected re-send stores the rest (the stored ones are duplicates).
    span_errors = dict(mapped.rejected)
    for item in batch.rejected + checked.rejected:
        span_errors.setdefault(mapped.events[item["index"]][0], item["error"])
    outcome = BatchOutcome(
        accepted=inserted,
        duplicates=checked.kept - inserted + batch.in_batch_duplicates,
        rejected=[{"index": i, "error": e} for i, e in sorted(span_errors.items())],
    )
    flow.report(outcome, principal.token_id, "otlp")
    return Response(otlp.response_body(media, len(span_errors),
                                       _span_message(span_errors, mapped.ignored)),
                    status_code=200, media_type=media)


def _span_message(span_errors: dict[int, str], ignored: int) -> str:
    """partialSuccess.errorMessage: the first rejections by span index, and ignored spans."""
    parts = [f"span {i}: {e}" for i, e in sorted(span_errors.items())[:5]]
    if len(span_errors) > 5:
        parts.append(f"and {len(span_errors) - 5} more rejected spans")
    if ignored:
        parts.append(f"{ignored} spans matched no mapping rule and were ignored")
    return "; ".join(parts)


def _forbidden_summary(errors: list[str]) -> str:
    """403 detail for a batch with nothing this token may write: the distinct reasons."""
    distinct = list(dict.fromkeys(e.partition(": ")[2] for e in errors))
    more = f" (and {len(distinct) - 3} more)" if len(distinct) > 3 else ""
    return "nothing in this batch may be written with this token: " + "; ".join(distinct[:3]) + more


def utc_now() -> datetime:
    return datetime.now(UTC)
