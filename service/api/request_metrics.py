"""Process-local request metrics, on the app's own registry (never the global one)."""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator
from itertools import accumulate
from typing import Any

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class HttpMetrics:
    """The request and ingest-outcome metrics: `ett_http_request_duration_seconds` by method,
    route and status, and `ett_events_ingested` by outcome.

    Kept as plain numbers and rendered as prometheus_client's Histogram and Counter render
    them (`tests/metrics/test_request_metrics.py` holds the text equal): the library's
    objects took a lock and ~3 us of Python per observation, a tenth of what a whole 1-event
    request may cost (docs/performance.md, issue 30). Every observation is made on the
    event loop's thread (the ASGI layer times every route); a scrape from another thread
    may see one observation half counted, as it may with the library's per-bucket locks.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = _Durations(LATENCY_BUCKETS)
        registry.register(self.requests)
        self.events = _Outcomes()
        registry.register(self.events)

    def count_batch(self, accepted: int, duplicates: int, rejected: int) -> None:
        counts = self.events.counts
        counts[0] += accepted
        counts[1] += duplicates
        counts[2] += rejected

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.observe((method, route, status), seconds)


class _Durations(Collector):
    NAME = "ett_http_request_duration_seconds"
    HELP = "HTTP request latency by route template, method and status code."
    LABELS = ("method", "route", "status")

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self._bounds = (*map(float, buckets), math.inf)
        self._les = tuple(map(floatToGoString, self._bounds))
        # (method, route, status) -> each bucket's own count (not cumulative), then the sum.
        self.series: dict[tuple[str, str, int], list[float]] = {}

    def observe(self, key: tuple[str, str, int], seconds: float) -> None:
        counts = self.series.get(key)
        if counts is None:
            counts = self.series[key] = [0.0] * (len(self._bounds) + 1)
        # The first bucket whose bound is at least the value, as the library's.
        counts[bisect_left(self._bounds, seconds)] += 1.0
        counts[-1] += seconds

    def describe(self) -> Iterator[HistogramMetricFamily]:
        yield HistogramMetricFamily(self.NAME, self.HELP, labels=self.LABELS)

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.NAME, self.HELP, labels=self.LABELS)
        for (method, route, status), counts in list(self.series.items()):
            cumulative = list(accumulate(counts[:-1]))
            family.add_metric([method, route, str(status)],
                              list(zip(self._les, cumulative, strict=True)), counts[-1])
        yield family


class _Outcomes(Collector):
    NAME = "ett_events_ingested"
    HELP = "Events received by POST /v1/events, by outcome (accepted, duplicate, rejected)."
    OUTCOMES = ("accepted", "duplicate", "rejected")

    def __init__(self) -> None:
        self.counts = [0.0, 0.0, 0.0]

    def describe(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(self.NAME, self.HELP, labels=["outcome"])

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(self.NAME, self.HELP, labels=["outcome"])
        for outcome, count in zip(self.OUTCOMES, list(self.counts), strict=True):
            family.add_metric([outcome], count)
        yield family


class _Waits(Collector):
    def __init__(self, held: Callable[[], int]) -> None:
        self._held = held

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(
            "ett_ingest_fair_waits", "Ingest requests that waited for their token's turn"
            " (the fair queue across tokens, while the process was behind).",
            value=self._held())


def watch_event_loop(registry: CollectorRegistry, lag_s: Callable[[], float],
                     held: Callable[[], int], store_behind_s: Callable[[], float]) -> None:
    """The event loop's and the group commits' lateness, and the fair queue's waits, read
    when scraped."""
    Gauge("ett_event_loop_lag_seconds", "How late the event loop last ran a callback asked"
          " for every 10 ms (the loop's own queueing delay).",
          registry=registry).set_function(lag_s)
    Gauge("ett_ingest_store_lag_seconds", "How much longer the latest group commits took,"
          " from their first batch to their COMMIT, than the quickest of the last one to two"
          " minutes.", registry=registry).set_function(store_behind_s)
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
