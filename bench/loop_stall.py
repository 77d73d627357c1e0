"""Loop stall: no request's body may freeze the service for everyone else.

A real `ett serve --no-aggregator`. For each route that reads a body, one client sends the
worst body that route may get (below), a few times in a row; meanwhile two other clients,
each one request at a time, probe `GET /healthz` and post a single event with another
writer's token. Measured per route: the probes' p50, p99 and max latency while the worst
bodies are in flight (the max /healthz latency bounds the longest event-loop stall), and how
each worst body was answered.

    python -m bench --only loop_stall

Every request goes to 127.0.0.1 and has a timeout; the worst bodies are built in memory:

- `traces_protobuf`: gzip OTLP protobuf, one resource with 2,000 attributes and 20,000
  spans that match no mapping rule (each span used to copy every resource attribute).
- `traces_json`: about 5 MB of OTLP JSON (the body limit), 14,000 spans with three
  attributes each.
- `events`: about 4.9 MB, 5,000 events with 800-byte attrs and `+01:00` offsets (the
  per-event path, the slower one).
- `annotations`: a 20 MB JSON body (now refused by its size before it is read).
- `login`: a 20 MB sign-in form (now refused by its size before it is read).
"""

from __future__ import annotations

import contextlib
import gzip
import os
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from .common import ADMIN_TOKEN, Postgres, ett_serve, nearest_rank, record, writer_token

NAME = "loop_stall"
TARGET_MS = 100.0
TIMEOUT_S = 300.0
MAX_BODIES = 200


def _now_ns() -> int:
    return int((datetime.now(UTC) - timedelta(minutes=30)).timestamp()) * 10**9


def _traces_request(resource_attrs: int, spans: int) -> ExportTraceServiceRequest:
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.extend(
        KeyValue(key=f"host.attr.{i}", value=AnyValue(string_value=f"value-{i:08d}"))
        for i in range(resource_attrs))
    out = rs.scope_spans.add().spans
    base, trace = _now_ns(), os.urandom(16)
    for i in range(spans):
        start = base + i * 1000
        span = out.add(trace_id=trace, span_id=os.urandom(8), name="dataloader.next",
                       start_time_unix_nano=start, end_time_unix_nano=start + 500)
        span.attributes.append(KeyValue(key="step", value=AnyValue(int_value=i)))
    return req


def _traces_json(spans: int) -> bytes:
    base, trace = _now_ns(), os.urandom(16).hex()
    items = [{"traceId": trace, "spanId": os.urandom(8).hex(), "name": "dataloader.next",
              "startTimeUnixNano": str(base + i * 1000),
              "endTimeUnixNano": str(base + i * 1000 + 500),
              "attributes": [{"key": "step", "value": {"intValue": str(i)}},
                             {"key": "worker", "value": {"stringValue": f"w{i % 64:04d}"}},
                             {"key": "batch", "value": {"stringValue": "x" * 24}}]}
             for i in range(spans)]
    return orjson.dumps({"resourceSpans": [{"resource": {"attributes": []},
                                            "scopeSpans": [{"spans": items}]}]})


def _events_body() -> bytes:
    ts = (datetime.now(UTC) + timedelta(hours=1) - timedelta(minutes=5)).strftime(
        "%Y-%m-%dT%H:%M:%S+01:00")
    job = f"stall-{uuid.uuid4().hex[:8]}"
    events = [{"event_id": str(uuid.uuid4()), "ts": ts, "job_id": job, "attempt": 0,
               "model": "bench_stall", "type": "heartbeat",
               "attrs": {"note": "y" * 800}} for _ in range(5000)]
    return orjson.dumps({"events": events})


def _worst_bodies(quick: bool) -> dict[str, Callable[[], tuple[str, dict[str, str], bytes]]]:
    spans = 2000 if quick else 20_000
    big = (2 if quick else 20) * 1024 * 1024
    auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    return {
        "traces_protobuf": lambda: (
            "/v1/traces", {**auth, "Content-Type": "application/x-protobuf",
                           "Content-Encoding": "gzip"},
            gzip.compress(_traces_request(2000, spans).SerializeToString())),
        "traces_json": lambda: ("/v1/traces", {**auth, "Content-Type": "application/json"},
                                _traces_json(spans * 7 // 10)),
        "events": lambda: ("/v1/events", {**auth, "Content-Type": "application/json"},
                           _events_body()),
        "annotations": lambda: (
            "/v1/annotations", {**auth, "Content-Type": "application/json"},
            orjson.dumps({"title": "t", "text": "z" * big})),
        "login": lambda: ("/ui/login", {"Content-Type": "application/x-www-form-urlencoded"},
                          b"token=" + b"a" * big + b"&next=%2Fui%2F"),
    }


def _probe(stop: threading.Event, out: list[float], send: Callable[[httpx.Client], int]
           ) -> None:
    with httpx.Client(timeout=TIMEOUT_S) as client:
        while not stop.is_set():
            t0 = time.perf_counter()
            with contextlib.suppress(httpx.HTTPError):
                send(client)
            out.append((time.perf_counter() - t0) * 1000)
            time.sleep(0.01)


def _quantile(values: list[float], q: float) -> float:
    return round(nearest_rank(values, q), 1)


def _one_route(base: str, writer: str, make: Callable[[], tuple[str, dict[str, str], bytes]],
               reps: int, min_s: float) -> dict[str, Any]:
    path, headers, body = make()
    health: list[float] = []
    posts: list[float] = []
    stop = threading.Event()

    def healthz(client: httpx.Client) -> int:
        return client.get(base + "/healthz").status_code

    def single(client: httpx.Client) -> int:
        ev = {"event_id": str(uuid.uuid4()),
              "ts": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
              "job_id": "probe-job", "attempt": 0, "model": "search", "type": "heartbeat"}
        return client.post(base + "/v1/events", json={"events": [ev]},
                           headers={"Authorization": f"Bearer {writer}"}).status_code

    probes = [threading.Thread(target=_probe, args=(stop, out, fn), daemon=True)
              for out, fn in ((health, healthz), (posts, single))]
    for t in probes:
        t.start()
    time.sleep(0.3)
    health.clear()
    posts.clear()
    answers, seconds = [], []
    started = time.monotonic()
    if not path:
        time.sleep(min_s)
    with httpx.Client(timeout=TIMEOUT_S) as client:
        # At least `reps` bodies, and bodies for at least `min_s` (so that the probes have
        # samples enough for a p99), never more than MAX_BODIES.
        while path and len(answers) < MAX_BODIES and (
                len(answers) < reps or time.monotonic() - started < min_s):
            t0 = time.perf_counter()
            try:
                answers.append(client.post(base + path, content=body,
                                           headers=headers).status_code)
            except httpx.HTTPError as exc:  # refused before the body was all sent
                answers.append(type(exc).__name__)
            seconds.append(round(time.perf_counter() - t0, 2))
    stop.set()
    for t in probes:
        t.join(timeout=TIMEOUT_S)
    counted = {str(a): answers.count(a) for a in dict.fromkeys(answers)}
    return {"body_bytes": len(body), "answers": counted, "bodies": len(answers),
            "seconds": {"max": max(seconds, default=0), "total": round(sum(seconds), 2)},
            "healthz_ms": {"p50": _quantile(health, 0.5), "p99": _quantile(health, 0.99),
                           "max": round(max(health, default=float("nan")), 1),
                           "n": len(health)},
            "single_event_ms": {"p50": _quantile(posts, 0.5), "p99": _quantile(posts, 0.99),
                                "max": round(max(posts, default=float("nan")), 1),
                                "n": len(posts)}}


def run(pg: Postgres, quick: bool) -> dict[str, Any]:
    url = pg.create_database("bench_stall")
    reps, min_s = (1, 1.0) if quick else (3, 8.0)
    routes: dict[str, Any] = {}
    with ett_serve(url) as srv:
        writer = writer_token(url, "search", ("search*",))
        # The probes alone first: what the machine gives when nothing else is sent.
        bodies = {"idle": lambda: ("", {}, b""), **_worst_bodies(quick)}
        for name, make in bodies.items():
            routes[name] = fig = _one_route(srv.url, writer, make, 0 if name == "idle" else reps,
                                            min_s)
            print(f"{name}: {fig['body_bytes']} bytes x{fig['bodies']} -> {fig['answers']},"
                  f" {fig['seconds']} s; /healthz p99 {fig['healthz_ms']['p99']} ms"
                  f" (max {fig['healthz_ms']['max']}), single event p99"
                  f" {fig['single_event_ms']['p99']} ms (max {fig['single_event_ms']['max']})",
                  flush=True)
    pg.drop_database(url)
    figures = {"label": os.environ.get("ETT_BENCH_LABEL", ""), "reps": reps, "routes": routes}
    targets: list[tuple[str, str, bool | None]] = []
    for name, fig in routes.items():
        if name == "idle":
            h, p = fig["healthz_ms"], fig["single_event_ms"]
            targets.append(("nothing else sent: the probes' own latency (plain figure)",
                            f"/healthz p99 {h['p99']} ms (max {h['max']}), event p99"
                            f" {p['p99']} ms (max {p['max']})", None))
            continue
        h, p = fig["healthz_ms"], fig["single_event_ms"]
        targets.append((f"{name}: /healthz and another writer's single event under"
                        f" {TARGET_MS:.0f} ms p99 (max = longest stall seen)",
                        f"/healthz p99 {h['p99']} ms (max {h['max']}), event p99 {p['p99']} ms"
                        f" (max {p['max']}); answers {fig['answers']}",
                        None if quick else h["p99"] < TARGET_MS and p["p99"] < TARGET_MS))
    return record(NAME, quick, figures, targets)
