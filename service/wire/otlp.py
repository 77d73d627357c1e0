"""OTLP/HTTP trace bodies: from the bytes of `POST /v1/traces` to plain span records.

Decoding uses the official `opentelemetry-proto` messages, so protobuf bodies are read
exactly as every OpenTelemetry exporter writes them. OTLP JSON differs from protobuf's own
JSON mapping in one way that matters here: trace and span ids are hex strings, not base64
(OTLP specification, "JSON Protobuf Encoding"), so they are rewritten before `json_format`
parses the document; unknown fields are ignored, as the specification asks of receivers.
"""

from __future__ import annotations

import base64
import binascii
from collections import ChainMap
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import orjson
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Status

from service.errors import BadRequest, PayloadTooLarge, Unprocessable, UnsupportedMediaType
from service.wire.body import json_object

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
# Levels of arrays and key-value lists in one attribute value. Protobuf itself stops at 100
# nested messages (three per level); deeper JSON used to end in a RecursionError (a 500).
MAX_VALUE_DEPTH = 16
# The JSON document's levels that allows: ten down to a span's first value, four a level.
MAX_JSON_DEPTH = 12 + 4 * MAX_VALUE_DEPTH
_ID_FIELDS = frozenset({"traceId", "spanId", "parentSpanId", "trace_id", "span_id",
                        "parent_span_id"})


class SpanRecord(NamedTuple):
    """One span with what the mapping reads: ids in hex, times in epoch nanoseconds."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    start_ns: int
    end_ns: int
    error: bool
    status_message: str
    # Span attributes over the resource's (span attributes win): a view sharing the
    # resource's one dict, never a copy per span (30,000 resource attributes copied into
    # each of 150,000 spans once held the event loop for 13 s).
    attributes: Mapping[str, Any]


def media_type_of(content_type: str | None) -> str:
    """The body's media type, or 415 naming what is accepted."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media not in (PROTOBUF, JSON):
        raise UnsupportedMediaType(
            f"Content-Type {content_type or '(none)'!r} is not supported; send {PROTOBUF}"
            f" or {JSON}")
    return media


def _hex_ids_to_base64(node: Any, depth: int = 1) -> Any:
    if depth > MAX_JSON_DEPTH and isinstance(node, dict | list):
        raise Unprocessable(f"body: OTLP JSON nested deeper than {MAX_JSON_DEPTH} levels"
                            f" (attribute values nest at most {MAX_VALUE_DEPTH} levels)")
    if isinstance(node, dict):
        return {key: (_id_to_base64(key, value) if key in _ID_FIELDS
                      else _hex_ids_to_base64(value, depth + 1))
                for key, value in node.items()}
    if isinstance(node, list):
        return [_hex_ids_to_base64(item, depth + 1) for item in node]
    return node


def _id_to_base64(key: str, value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return base64.b64encode(bytes.fromhex(value)).decode()
    except ValueError:
        raise BadRequest(f"{key}: {value[:40]!r} is not a hex id") from None


def parse_request(body: bytes, media_type: str) -> ExportTraceServiceRequest:
    """The export request, or 400 naming what is wrong with the body."""
    request = ExportTraceServiceRequest()
    if media_type == PROTOBUF:
        try:
            request.ParseFromString(body)
        except DecodeError as exc:
            raise BadRequest(f"body is not an OTLP ExportTraceServiceRequest: {exc}") from None
        return request
    doc = json_object(body, '{"resourceSpans": [...]}')
    try:
        json_format.ParseDict(_hex_ids_to_base64(doc), request, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise BadRequest(f"body is not an OTLP ExportTraceServiceRequest: {exc}") from None
    return request


def _value(value: AnyValue, depth: int) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind in ("array_value", "kvlist_value") and depth >= MAX_VALUE_DEPTH:
        raise Unprocessable(f"attributes: a value nested deeper than {MAX_VALUE_DEPTH} levels"
                            " of arrays and key-value lists")
    if kind == "array_value":
        return [_value(v, depth + 1) for v in value.array_value.values]
    if kind == "kvlist_value":
        return _attributes(value.kvlist_value.values, depth + 1)
    if kind == "bytes_value":
        return binascii.hexlify(value.bytes_value).decode()
    return getattr(value, kind)


def _attributes(pairs: Any, depth: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {}
    pair: KeyValue
    for pair in pairs:
        out[pair.key] = _value(pair.value, depth)
    return out


def check_budget(request: ExportTraceServiceRequest, max_spans: int, max_attributes: int
                 ) -> int:
    """Count the spans and attributes (each resource's once, each span's) before any is
    mapped; 413 naming the limit and its setting if either is over. Returns the spans."""
    spans = attributes = 0
    for resource_spans in request.resource_spans:
        attributes += len(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            spans += len(scope_spans.spans)
            if spans > max_spans:
                raise PayloadTooLarge(f"the request holds more than {max_spans} spans, the"
                                      " limit (ETT_OTLP_MAX_SPANS); send fewer per request")
            for span in scope_spans.spans:
                attributes += len(span.attributes)
        if attributes > max_attributes:
            break
    if attributes > max_attributes:
        raise PayloadTooLarge(f"the request holds more than {max_attributes} attributes"
                              " (resources' and spans'), the limit (ETT_OTLP_MAX_ATTRIBUTES);"
                              " send fewer per request")
    return spans


def spans_of(request: ExportTraceServiceRequest) -> Iterator[SpanRecord]:
    """Every span of the request in body order, with its resource's attributes merged in."""
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield SpanRecord(
                    trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                    parent_span_id=span.parent_span_id.hex(), name=span.name,
                    start_ns=span.start_time_unix_nano, end_ns=span.end_time_unix_nano,
                    error=span.status.code == Status.STATUS_CODE_ERROR,
                    status_message=span.status.message,
                    attributes=ChainMap(_attributes(span.attributes), resource),
                )


def response_body(media_type: str, rejected_spans: int, error_message: str) -> bytes:
    """ExportTraceServiceResponse in the request's encoding; partial success only if any."""
    response = ExportTraceServiceResponse()
    if rejected_spans or error_message:
        response.partial_success.rejected_spans = rejected_spans
        response.partial_success.error_message = error_message
    if media_type == PROTOBUF:
        return response.SerializeToString()
    return orjson.dumps(json_format.MessageToDict(response))
