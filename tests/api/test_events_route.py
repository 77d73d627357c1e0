"""POST /v1/events served ahead of FastAPI (service.api.events_route) answers exactly as the
FastAPI route does: status, headers, body and request metrics, success and every error."""

from __future__ import annotations

import asyncio
import gzip
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import orjson
import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.api.events_route import EventsRoute, front_door
from tests.access.access_helpers import token
from tests.conftest import ADMIN_TOKEN, make_context
from tests.factories import event

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@pytest.fixture
def apps(db_engine) -> Iterator[tuple[TestClient, TestClient, object, object]]:
    """(fast, slow) clients of two apps on the test database, and their contexts."""
    fast_ctx = make_context(db_engine, with_aggregator=False, max_body_bytes=4096)
    slow_ctx = make_context(db_engine, with_aggregator=False, max_body_bytes=4096)
    fast_app, slow_app = create_app(fast_ctx), create_app(slow_ctx, fast=False)
    assert isinstance(fast_app.state.fast_routes[("POST", "/v1/events")], EventsRoute)
    assert slow_app.state.fast_routes == {}
    with TestClient(fast_app) as fast, TestClient(slow_app) as slow:
        yield fast, slow, fast_ctx, slow_ctx


def heartbeat(model: str = "model-a", **fields: object) -> dict:
    """An event of now (within a writer's ingest window)."""
    return event("heartbeat", -1, job_id=f"route-{model}", model=model,
                 base=datetime.now(UTC), **fields)


def requests(db_engine) -> list[tuple[str, dict, bytes]]:
    reader = token(db_engine, "reader")
    writer = token(db_engine, "writer", "ads", ("ads_*",))
    one = lambda: orjson.dumps({"events": [heartbeat()]})  # noqa: E731
    return [
        ("one event", ADMIN, one()),
        ("ten events", ADMIN, orjson.dumps({"events": [heartbeat() for _ in range(10)]})),
        ("a rejected event", ADMIN, orjson.dumps({"events": [heartbeat(), {"type": "x"}]})),
        ("a duplicate in the batch", ADMIN, orjson.dumps({"events": [heartbeat()] * 2})),
        ("gzip", {**ADMIN, "Content-Encoding": "gzip"}, gzip.compress(one())),
        ("no token", {}, one()),
        ("an empty header", {"Authorization": ""}, one()),
        ("another scheme", {"Authorization": "Basic abc"}, one()),
        ("an unknown token", {"Authorization": "Bearer nope"}, one()),
        ("a reader", {"Authorization": reader["Authorization"]}, one()),
        ("another team's model", {"Authorization": writer["Authorization"]}, one()),
        ("a writer's own model", {"Authorization": writer["Authorization"]},
         orjson.dumps({"events": [heartbeat("ads_x")]})),
        ("a writer claiming another team", {"Authorization": writer["Authorization"]},
         orjson.dumps({"events": [heartbeat("ads_x", team="feed"), heartbeat("ads_y")]})),
        ("another media type", {**ADMIN, "Content-Type": "text/plain"}, one()),
        ("an unknown encoding", {**ADMIN, "Content-Encoding": "zstd"}, one()),
        ("not JSON", ADMIN, b"{nope"),
        ("an empty body", ADMIN, b""),
        ("no events", ADMIN, b'{"events": []}'),
        ("too large", ADMIN, b" " * 5000),
        ("a bad Content-Length", {**ADMIN, "Content-Length": "x"}, one()),
    ]


def answer(client: TestClient, headers: dict, body: bytes) -> tuple[int, list, object]:
    r = client.post("/v1/events", content=body,
                    headers={"Content-Type": "application/json", **headers})
    return r.status_code, list(r.headers.items()), r.json()


def test_every_answer_is_the_fastapi_routes_own(apps, db_engine) -> None:
    fast, slow, fast_ctx, slow_ctx = apps
    for name, headers, body in requests(db_engine):
        slow_answer = answer(slow, headers, body)
        # The same request again is all duplicates: the fast one gets a fresh copy.
        fresh = body.replace(b"route-", b"again-") if b"event_id" in body else body
        fresh_answer = answer(fast, headers, _new_ids(fresh))
        assert fresh_answer == slow_answer, name
    assert _series(fast_ctx) == _series(slow_ctx)
    assert len(_series(fast_ctx)) > 8


def _new_ids(body: bytes) -> bytes:
    """The body with each event id replaced by a fresh one (a repeated id stays repeated)."""
    try:
        doc = orjson.loads(gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body)
    except (orjson.JSONDecodeError, OSError):
        return body
    if not isinstance(doc, dict) or not isinstance(doc.get("events"), list):
        return body
    fresh: dict[str, str] = {}
    for e in doc["events"]:
        if isinstance(e, dict) and "event_id" in e:
            e["event_id"] = fresh.setdefault(e["event_id"], str(uuid.uuid4()))
    out = orjson.dumps(doc)
    return gzip.compress(out) if body[:2] == b"\x1f\x8b" else out


def _series(ctx) -> dict[str, str]:
    """The request metrics of POST /v1/events and the ingest outcome counters."""
    lines = ctx.registry.exposition().decode().splitlines()
    return {k: v for k, _, v in (line.rpartition(" ") for line in lines)
            if ('route="/v1/events"' in k and "_count" in k) or k.startswith(
                "ett_events_ingested_total")}


async def _asgi(app, headers: list, receive) -> tuple[int, list, bytes]:
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/events", "raw_path": b"/v1/events",
             "headers": headers, "query_string": b"", "root_path": "", "http_version": "1.1",
             "scheme": "http", "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    await app(scope, receive, send)
    return sent[0]["status"], sent[0]["headers"], sent[1]["body"]


def test_503_at_the_limits_and_408_at_the_deadline_are_the_same_both_ways(db_engine) -> None:
    """Raw ASGI (a test client cannot hold a request open): one token's only slot held by
    a stalled body; the next request of that token is refused, the stalled one times out."""
    auth = [(b"authorization", f"Bearer {ADMIN_TOKEN}".encode()),
            (b"content-type", b"application/json")]
    answers = []
    for fast in (True, False):
        ctx = make_context(db_engine, with_aggregator=False, ingest_max_in_flight_per_token=1,
                           ingest_body_deadline_s=0.3)
        app = create_app(ctx, fast=fast)

        async def stalled() -> dict:
            await asyncio.Event().wait()
            return {}

        async def whole() -> dict:
            return {"type": "http.request", "body": b'{"events": []}', "more_body": False}

        async def main(app=app) -> list:
            first = asyncio.create_task(_asgi(app, auth, stalled))
            await asyncio.sleep(0.05)
            second = await _asgi(app, auth, whole)
            return [await first, second]

        answers.append(asyncio.run(main()))
    assert answers[0] == answers[1]
    (timed_out, _, detail), (refused, headers, _) = answers[0]
    assert (timed_out, refused) == (408, 503) and b"within 0.3 s" in detail
    assert (b"retry-after", b"1") in headers


def test_front_door_answers_its_routes_and_passes_the_rest_on() -> None:
    seen: list[str] = []

    async def outer(scope, receive, send) -> None:
        seen.append("outer " + scope["type"])

    async def route(scope, receive, send) -> None:
        seen.append("route")

    app = front_door(outer, {("POST", "/v1/events"): route})

    async def main() -> None:
        for scope in ({"type": "http", "method": "POST", "path": "/v1/events"},
                      {"type": "http", "method": "GET", "path": "/v1/events"},
                      {"type": "http", "method": "POST", "path": "/v1/traces"},
                      {"type": "lifespan"}):
            await app(scope, None, None)

    asyncio.run(main())
    assert seen == ["route", "outer http", "outer http", "outer lifespan"]
    assert front_door(outer, {}) is outer
