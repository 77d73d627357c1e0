"""Process-local request metrics, on the app's own registry (never the global one)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.requests import Request
from starlette.responses import Response

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class HttpMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Histogram(
            "ett_http_request_duration_seconds",
            "HTTP request latency by route template, method and status code.",
            ["method", "route", "status"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.events = Counter(
            "ett_events_ingested",
            "Events received by POST /v1/events, by outcome (accepted, duplicate, rejected).",
            ["outcome"],
            registry=registry,
        )
        for outcome in ("accepted", "duplicate", "rejected"):
            self.events.labels(outcome)

    def count_batch(self, accepted: int, duplicates: int, rejected: int) -> None:
        self.events.labels("accepted").inc(accepted)
        self.events.labels("duplicate").inc(duplicates)
        self.events.labels("rejected").inc(rejected)

    async def middleware(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        start = time.perf_counter()
        status = 500
        try:
            response = await call_next(request)
            status = response.status_code
            return response
        finally:
            self.requests.labels(request.method, _route_template(request), str(status)).observe(
                time.perf_counter() - start
            )


def _route_template(request: Request) -> str:
    # Label by template, never by raw path: /v1/jobs/{job_id} must stay one series.
    # The router records the matched route in the scope it shares with the middleware.
    route = request.scope.get("route")
    return getattr(route, "path", None) or "unmatched"
