"""The request metrics kept as plain numbers (service.api.request_metrics) render exactly
what prometheus_client's Histogram and Counter render for the same observations."""

from __future__ import annotations

import random

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from service.api.request_metrics import LATENCY_BUCKETS, HttpMetrics


def _library(observations, batches) -> bytes:
    registry = CollectorRegistry()
    requests = Histogram("ett_http_request_duration_seconds",
                         "HTTP request latency by route template, method and status code.",
                         ["method", "route", "status"], buckets=LATENCY_BUCKETS,
                         registry=registry)
    events = Counter("ett_events_ingested", "Events received by POST /v1/events, by outcome"
                     " (accepted, duplicate, rejected).", ["outcome"], registry=registry)
    children = [events.labels(o) for o in ("accepted", "duplicate", "rejected")]
    for method, route, status, seconds in observations:
        requests.labels(method, route, str(status)).observe(seconds)
    for batch in batches:
        for child, n in zip(children, batch, strict=True):
            child.inc(n)
    return generate_latest(registry)


def _ours(observations, batches) -> bytes:
    registry = CollectorRegistry()
    metrics = HttpMetrics(registry)
    for method, route, status, seconds in observations:
        metrics.observe(method, route, status, seconds)
    for batch in batches:
        metrics.count_batch(*batch)
    return generate_latest(registry)


def test_the_text_is_the_librarys_for_the_same_observations() -> None:
    disable_created_metrics()  # as build_context does
    rng = random.Random(7)
    # Every bucket bound exactly, values between and beyond them, a few routes and statuses.
    values = [*LATENCY_BUCKETS, 0.0, 1e-6, 11.0, 1e3] + [rng.uniform(0, 12) for _ in range(300)]
    observations = [(rng.choice(["GET", "POST"]), rng.choice(["/v1/events", "/metrics"]),
                     rng.choice([202, 200, 503]), v) for v in values]
    batches = [(rng.randrange(5), rng.randrange(3), rng.randrange(2)) for _ in range(20)]
    assert _ours(observations, batches) == _library(observations, batches)
    assert _ours([], []) == _library([], [])
