"""OTLP span path: what `POST /v1/traces` costs per span before the store.

One export request of 512 spans (the OpenTelemetry SDK's default batch) shaped like a
one-logger job: training loops holding sync and async checkpoint saves, initialization
spans, profiling spans that map to nothing, and the attempt span. Each run decodes it
(protobuf, and OTLP JSON), maps the spans to events and validates them as the endpoint
does; the store is the same as /v1/events' (bench ingest_batch measures it).

    python -m bench --only otlp

Prints the median, min and max per span and appends a record to bench/results/otlp.json.
"""

from __future__ import annotations

import base64
import os
import time
from datetime import UTC, datetime, timedelta

import orjson
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from service.access.auth import Principal
from service.wire import otlp
from service.wire.batch import validate_batch
from service.wire.span_mapping import SpanMapping
from service.wire.spans import events_of

from .common import fmt, record, spread

NAME = "otlp"
SPANS = 512
_NAMES = ("training_loop", "checkpoint_save_sync", "checkpoint_save_async", "iteration",
          "model_initialization", "data_loading")


def make_request(n: int) -> ExportTraceServiceRequest:
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    for key, value in (("ett.job_id", "bench-job"), ("ett.model", "bench-model"),
                       ("ett.team", "bench-team")):
        rs.resource.attributes.append(KeyValue(key=key, value=AnyValue(string_value=value)))
    spans = rs.scope_spans.add().spans
    base = int((datetime.now(UTC) - timedelta(hours=2)).timestamp()) * 10**9
    trace = os.urandom(16)
    root = spans.add(trace_id=trace, span_id=os.urandom(8), name="application",
                     start_time_unix_nano=base, end_time_unix_nano=base + n * 10**9)
    root.attributes.append(KeyValue(key="ett.gpus", value=AnyValue(int_value=8)))
    for i in range(n - 1):
        spans.add(trace_id=trace, span_id=os.urandom(8), parent_span_id=root.span_id,
                  name=_NAMES[i % len(_NAMES)], start_time_unix_nano=base + i * 10**9,
                  end_time_unix_nano=base + i * 10**9 + 5 * 10**8)
    return req


def _json_body(req: ExportTraceServiceRequest) -> bytes:
    doc = json_format.MessageToDict(req)
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for sp in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in sp:
                        sp[key] = base64.b64decode(sp[key]).hex()
    return orjson.dumps(doc)


def run(_pg: object, quick: bool, runs: int = 7) -> dict:
    n = 64 if quick else SPANS
    req = make_request(n)
    bodies = {otlp.PROTOBUF: req.SerializeToString(), otlp.JSON: _json_body(req)}
    mapping, writer = SpanMapping(), Principal(role="admin", token_id="bench")

    def once(media: str) -> tuple[float, int]:
        t0 = time.perf_counter()
        mapped = events_of(otlp.spans_of(otlp.parse_request(bodies[media], media)), mapping)
        batch = validate_batch([e for _, e in mapped.events], writer, now=datetime.now(UTC),
                               max_future_s=300, max_age_s=90 * 86400)
        elapsed = time.perf_counter() - t0
        assert not batch.rejected and not mapped.rejected
        return elapsed * 1e6 / n, len(batch.rows)

    figures: dict[str, object] = {"spans": n}
    targets = []
    for label, media in (("protobuf", otlp.PROTOBUF), ("json", otlp.JSON)):
        once(media)  # warm-up
        results = [once(media) for _ in range(runs)]
        per_span = spread([r[0] for r in results], 2)
        figures[f"{label}_us_per_span"] = per_span
        figures["events"] = results[0][1]
        print(f"{label}: {n} spans -> {results[0][1]} events, decode + map + validate"
              f" {fmt(per_span, ' us/span', 2)}")
        # Exporters send protobuf by default: that path has the target; JSON (hand-made
        # bodies, debugging) is a figure. A training job emits tens of spans an hour, so
        # one core at 50 us a span serves some 70,000 jobs' spans.
        if media == otlp.PROTOBUF:
            targets.append((f"{label} body, decode + map + validate, < 50 us per span median",
                            fmt(per_span, " us/span", 2), per_span["median"] < 50))
        else:
            targets.append((f"{label} body, decode + map + validate, per span",
                            fmt(per_span, " us/span", 2), None))
    return record(NAME, quick, figures, targets)
