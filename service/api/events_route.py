"""`POST /v1/events` as a plain ASGI app, ahead of every other layer of the server.

A fleet of small writers makes this route most of the process's work, and per request the
layers above the endpoint cost more than the endpoint itself (docs/performance.md, issue
30): uvicorn's proxy-headers middleware, FastAPI's and Starlette's entry, the metrics and
token middlewares with a context variable and a wrapped `send` each, Starlette's `Request`
and `Response` objects. None of that depends on the request, so it is not paid here: the
route is found by its method and path before them (`front_door`, and inside the app for
anything that calls the app itself), the caller is checked as `writer_of("events")`
checks it, the request is taken by the same `service.ingest.take_events` as the FastAPI
endpoint, and the answer is sent as two ASGI messages with the headers Starlette's
`Response` would have given it. Request metrics are the same series; an error is answered
as the app's handler answers it.

Nothing here reads the client's address or scheme, which are all the proxy-headers layer
rewrites; every other route still goes through it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi.responses import JSONResponse

from service.access.auth import Authenticator, authorization
from service.access.callers import writing
from service.errors import EttError
from service.ingest import Ingestion, take_events

from .request_metrics import HttpMetrics

ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]
PATH = "/v1/events"
_JSON = (b"content-type", b"application/json")


def error_response(exc: EttError) -> JSONResponse:
    """The answer to an error the service raised on purpose (the app's handler)."""
    return JSONResponse({"detail": exc.message}, status_code=exc.status_code,
                        headers=exc.headers)


class EventsRoute:
    def __init__(self, flow: Ingestion, auth: Authenticator, metrics: HttpMetrics) -> None:
        self._flow = flow
        self._auth = auth
        self._metrics = metrics

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        start = time.perf_counter()
        status = 500  # as the metrics middleware counts a request that raised
        try:
            try:
                principal = writing(await self._auth.resolve_on_loop(authorization(scope)),
                                    "events")
                answer = await take_events(self._flow, principal, scope["headers"], receive)
            except EttError as exc:
                status = exc.status_code
                await error_response(exc)(scope, receive, send)
                return
            status = 202
            await send({"type": "http.response.start", "status": 202,
                        "headers": [(b"content-length", b"%d" % len(answer)), _JSON]})
            await send({"type": "http.response.body", "body": answer})
        finally:
            self._metrics.observe("POST", PATH, status, time.perf_counter() - start)


def front_door(outer: ASGIApp, routes: dict[tuple[str, str], ASGIApp]) -> ASGIApp:
    """`outer` (the app as the server wraps it) with `routes` answered before it."""
    if not routes:
        return outer
    find = routes.get

    async def front(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            route = find((scope["method"], scope["path"]))
            if route is not None:
                await route(scope, receive, send)
                return
        await outer(scope, receive, send)

    return front
