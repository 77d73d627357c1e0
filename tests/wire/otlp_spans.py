"""Build OTLP export requests for tests: a one-logger style job, in protobuf and OTLP JSON.

Times are whole seconds from a base instant, so expected figures are checked by hand.
"""

from __future__ import annotations

import base64
import os
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

SECOND_NS = 1_000_000_000


def base_ns() -> int:
    # An hour ago, on a whole second: inside the retention window, never in the future.
    now = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    return int(now.timestamp()) * SECOND_NS


def kv(key: str, value: Any) -> KeyValue:
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=str(value)))


def span(name: str, start_s: float, end_s: float, *, base: int, trace_id: bytes,
         parent: bytes = b"", error: str | None = None, **attrs: Any) -> Span:
    out = Span(trace_id=trace_id, span_id=os.urandom(8), parent_span_id=parent, name=name,
               start_time_unix_nano=base + int(start_s * SECOND_NS),
               end_time_unix_nano=base + int(end_s * SECOND_NS),
               attributes=[kv(k.replace("__", "."), v) for k, v in attrs.items()])
    if error is not None:
        out.status.code = Status.STATUS_CODE_ERROR
        out.status.message = error
    return out


def request_of(spans: list[Span], **resource: Any) -> ExportTraceServiceRequest:
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.extend(kv(k.replace("__", "."), v) for k, v in resource.items())
    rs.scope_spans.add().spans.extend(spans)
    return req


def one_logger_job(base: int, *, failed: bool = False) -> list[Span]:
    """application 0-100 s; model_initialization 2-10; training_loop 10-95 with sync saves
    30-35 and 60-64 inside it (and an async save 80-82 in the background).

    By hand, with the default taxonomy: held 100 s; initialization 8; checkpoint_save
    (wasted) 5 + 4 = 9; training 85 - 9 = 76; unattributed 0-2 and 95-100 = 7.
    """
    trace = os.urandom(16)
    app = span("application", 0, 100, base=base, trace_id=trace, ett__gpus=8,
               error="CUDA error: an illegal memory access" if failed else None)
    parent = app.span_id
    return [
        span("model_initialization", 2, 10, base=base, trace_id=trace, parent=parent),
        span("checkpoint_save_sync", 30, 35, base=base, trace_id=trace, parent=parent),
        span("checkpoint_save_sync", 60, 64, base=base, trace_id=trace, parent=parent),
        span("checkpoint_save_async", 80, 82, base=base, trace_id=trace, parent=parent),
        span("training_loop", 10, 95, base=base, trace_id=trace, parent=parent),
        span("iteration", 11, 12, base=base, trace_id=trace, parent=parent),
        app,
    ]


def as_otlp_json(req: ExportTraceServiceRequest) -> dict[str, Any]:
    """The OTLP JSON encoding: protobuf JSON with hex trace and span ids."""
    doc = json_format.MessageToDict(req)
    for rs in doc.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for sp in ss.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in sp:
                        sp[key] = base64.b64decode(sp[key]).hex()
    return doc
