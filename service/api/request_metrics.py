"""Process-local request metrics, on the app's own registry (never the global one)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

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
        self._outcomes = tuple(self.events.labels(o) for o in ("accepted", "duplicate",
                                                                "rejected"))
        # Children by (method, route, status): `labels()` costs a lock and a tuple each time.
        self._series: dict[tuple[str, str, int], Any] = {}

    def count_batch(self, accepted: int, duplicates: int, rejected: int) -> None:
        for child, n in zip(self._outcomes, (accepted, duplicates, rejected), strict=True):
            if n:  # each inc takes a lock: a small batch's zeros are most of them
                child.inc(n)

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        key = (method, route, status)
        child = self._series.get(key)
        if child is None:
            child = self._series[key] = self.requests.labels(method, route, str(status))
        child.observe(seconds)


class _Waits(Collector):
    def __init__(self, held: Callable[[], int]) -> None:
        self._held = held

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(
            "ett_ingest_fair_waits", "Ingest requests that waited for their token's turn"
            " (the fair queue across tokens, while the event loop was behind).",
            value=self._held())


def watch_event_loop(registry: CollectorRegistry, lag_s: Callable[[], float],
                     held: Callable[[], int]) -> None:
    """The event loop's lateness and the fair queue's waits, read when scraped."""
    Gauge("ett_event_loop_lag_seconds", "How late the event loop last ran a callback asked"
          " for every 10 ms (the loop's own queueing delay).",
          registry=registry).set_function(lag_s)
    registry.register(_Waits(held))


class MetricsMiddleware:
    """Time every HTTP request into `HttpMetrics` (a plain ASGI middleware: no
    BaseHTTPMiddleware task and stream per request). The time runs until the last byte of
    the response is handed to the server; a request that raised counts as status 500."""

    def __init__(self, app: Any, metrics: HttpMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_and_note(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            self.metrics.observe(scope["method"], _route_template(scope), status,
                                 time.perf_counter() - start)


def _route_template(scope: Any) -> str:
    # Label by template, never by raw path: /v1/jobs/{job_id} must stay one series.
    # The router records the matched route in the scope it shares with the middleware.
    route = scope.get("route")
    # path_format: the template without converters ({job_id}, not {job_id:path}).
    return getattr(route, "path_format", None) or getattr(route, "path", None) or "unmatched"
