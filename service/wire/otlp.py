"""OTLP/HTTP trace bodies: from the bytes of `POST /v1/traces` to plain span records.

Protobuf bodies are decoded by the official `opentelemetry-proto` messages, so they are read
exactly as every OpenTelemetry exporter writes them. OTLP JSON is protobuf's JSON mapping
but for one thing that matters here: trace and span ids are hex strings, not base64 (OTLP
specification, "JSON Protobuf Encoding"); unknown fields are ignored, as the specification
asks of receivers.

Protobuf's own JSON parser (`json_format`) is the reference for OTLP JSON, but it is pure
Python and costs 0.2-0.5 ms a span (docs/performance.md). So a JSON document is first read
by `_fast_message`, driven by the same message descriptors, which accepts only what
`json_format` certainly accepts with the same values (each field once, under its JSON or
its proto name; strings, booleans and integers in their plain JSON forms and range; enum
values by known name or number) and leaves plain lists and dicts. Anything else, valid or
not, goes through `json_format`, so the fast path can never let through what the reference
rejects nor word an error differently.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections import ChainMap
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import orjson
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
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


def parse_request(body: bytes | bytearray, media_type: str, *, reference: bool = False
                  ) -> TraceRequest:
    """The export request, or 400 naming what is wrong with the body. `reference`: read
    OTLP JSON with protobuf's own parser only (what the fast reading must equal)."""
    if media_type == PROTOBUF:
        request = ExportTraceServiceRequest()
        try:
            request.ParseFromString(body)
        except DecodeError as exc:
            raise BadRequest(f"body is not an OTLP ExportTraceServiceRequest: {exc}") from None
        return request
    doc = json_object(body, '{"resourceSpans": [...]}')
    if not reference:
        try:
            return JsonRequest(_fast_message(_REQUEST, doc, 1).get("resource_spans", []))
        except _Unsure:
            pass
    request = ExportTraceServiceRequest()
    try:
        json_format.ParseDict(_hex_ids_to_base64(doc), request, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise BadRequest(f"body is not an OTLP ExportTraceServiceRequest: {exc}") from None
    return request


class JsonRequest(NamedTuple):
    """An OTLP JSON export request as `json_format` would read it, in plain data: every
    message a dict by proto field name (absent fields absent), ids as bytes, each
    attribute value a dict of at most one kind (`{"int_value": 3}`)."""

    resource_spans: list[dict[str, Any]]


TraceRequest = ExportTraceServiceRequest | JsonRequest


class _Unsure(Exception):
    """The fast reading cannot vouch for this document: `json_format` decides it."""


class _Field(NamedTuple):
    name: str
    kind: str  # message, id, bytes, string, bool, int, double, enum
    repeated: bool
    oneof: str | None
    message: dict[str, _Field] | None
    lo: int = 0
    hi: int = 0
    enum: Mapping[str | int, int] | None = None


_INT_RANGES = {FieldDescriptor.CPPTYPE_INT32: (-(2**31), 2**31 - 1),
               FieldDescriptor.CPPTYPE_UINT32: (0, 2**32 - 1),
               FieldDescriptor.CPPTYPE_INT64: (-(2**63), 2**63 - 1),
               FieldDescriptor.CPPTYPE_UINT64: (0, 2**64 - 1)}
_KINDS = {FieldDescriptor.CPPTYPE_BOOL: "bool", FieldDescriptor.CPPTYPE_DOUBLE: "double",
          FieldDescriptor.CPPTYPE_STRING: "string", FieldDescriptor.CPPTYPE_ENUM: "enum",
          FieldDescriptor.CPPTYPE_MESSAGE: "message",
          **{cpp: "int" for cpp in _INT_RANGES}}
_DIGITS = re.compile(r"-?[0-9]+")
# json_format refuses such a key as an extension of a message that has none.
_EXTENSION_KEY = re.compile(r"\[[a-zA-Z0-9\._]*\]$")


def _table(descriptor: Descriptor, tables: dict[str, dict[str, _Field]]) -> dict[str, _Field]:
    """Each field of the message under its JSON and its proto name."""
    if descriptor.full_name in tables:
        return tables[descriptor.full_name]
    tables[descriptor.full_name] = table = {}
    for f in descriptor.fields:
        kind = _KINDS.get(f.cpp_type, "unsure")
        if f.type == FieldDescriptor.TYPE_BYTES:
            kind = "id" if f.name in _ID_FIELDS else "bytes"
        elif kind == "message" and (f.message_type.full_name.startswith("google.protobuf.")
                                    or f.message_type.GetOptions().map_entry):
            kind = "unsure"  # well-known types and maps have JSON forms of their own
        lo, hi = _INT_RANGES.get(f.cpp_type, (0, 0))
        enum = None
        if kind == "enum":
            enum = {v.name: v.number for v in f.enum_type.values}
            enum.update({v.number: v.number for v in f.enum_type.values})
        table[f.json_name] = table[f.name] = _Field(
            f.name, kind, f.is_repeated, f.containing_oneof.name if f.containing_oneof else None,
            _table(f.message_type, tables) if kind == "message" else None, lo, hi, enum)
    return table


_REQUEST = _table(ExportTraceServiceRequest.DESCRIPTOR, {})


def _fast_message(table: dict[str, _Field], node: Any, depth: int) -> dict[str, Any]:
    if type(node) is not dict or depth > MAX_JSON_DEPTH:
        raise _Unsure
    out: dict[str, Any] = {}
    seen: set[str] = set()
    for key, value in node.items():
        field = table.get(key)
        if field is None:
            if _EXTENSION_KEY.match(key):
                raise _Unsure
            # Ignored, as json_format ignores it, but checked as the hex-id rewrite (its
            # first step) checks every key of the document.
            if key in _ID_FIELDS:
                _id_to_base64(key, value)
            else:
                _hex_ids_to_base64(value, depth + 1)
            continue
        if field.name in seen:  # under both its names: json_format's order rules apply
            raise _Unsure
        seen.add(field.name)
        if value is None:  # null: the field's default
            continue
        if field.oneof is not None:
            if field.oneof in seen:
                raise _Unsure
            seen.add(field.oneof)
        if field.repeated:
            if type(value) is not list or depth + 1 > MAX_JSON_DEPTH:
                raise _Unsure
            out[field.name] = [_fast_value(key, field, item, depth + 2) for item in value]
        else:
            out[field.name] = _fast_value(key, field, value, depth + 1)
    return out


def _fast_value(key: str, field: _Field, value: Any, depth: int) -> Any:
    kind, cls = field.kind, type(value)
    if kind == "message" and field.message is not None:
        return _fast_message(field.message, value, depth)
    if kind == "string" and cls is str:  # orjson never gives a lone surrogate
        return value
    if kind == "int":
        if cls is str and _DIGITS.fullmatch(value):
            value, cls = int(value), int
        if cls is int and field.lo <= value <= field.hi:
            return value
    elif kind == "id" and cls is str:
        try:
            return bytes.fromhex(value)
        except ValueError:
            raise BadRequest(f"{key}: {value[:40]!r} is not a hex id") from None
    elif kind == "enum" and field.enum is not None and cls in (str, int):
        if value in field.enum:
            return field.enum[value]
    elif kind == "bool" and cls is bool:
        return value
    elif kind == "double" and cls in (int, float) and math.isfinite(value):
        return float(value)
    elif kind == "bytes" and cls is str:
        encoded = value.encode()
        try:  # as json_format reads bytes: URL-safe base64, padding optional
            return base64.urlsafe_b64decode(encoded + b"=" * (4 - len(encoded) % 4))
        except ValueError:
            pass
    raise _Unsure


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


def _too_deep() -> Unprocessable:
    return Unprocessable(f"attributes: a value nested deeper than {MAX_VALUE_DEPTH} levels"
                         " of arrays and key-value lists")


def _value(value: AnyValue, depth: int) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind in ("array_value", "kvlist_value") and depth >= MAX_VALUE_DEPTH:
        raise _too_deep()
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


def _json_value(value: dict[str, Any] | None, depth: int) -> Any:
    """`_value` of a JSON request's attribute value."""
    if not value:
        return None
    ((kind, inner),) = value.items()
    if kind in ("array_value", "kvlist_value") and depth >= MAX_VALUE_DEPTH:
        raise _too_deep()
    if kind == "array_value":
        return [_json_value(v, depth + 1) for v in inner.get("values", ())]
    if kind == "kvlist_value":
        return _json_attributes(inner.get("values", ()), depth + 1)
    if kind == "bytes_value":
        return binascii.hexlify(inner).decode()
    return inner


def _json_attributes(pairs: list[dict[str, Any]], depth: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        out[pair.get("key", "")] = _json_value(pair.get("value"), depth)
    return out


def _layout(request: TraceRequest) -> Iterator[tuple[Any, list[Any]]]:
    """(resource attributes, [spans of each scope]) of each resource, in body order."""
    if isinstance(request, JsonRequest):
        for rs in request.resource_spans:
            yield (rs.get("resource", {}).get("attributes", []),
                   [ss.get("spans", []) for ss in rs.get("scope_spans", [])])
        return
    for rs in request.resource_spans:
        yield rs.resource.attributes, [ss.spans for ss in rs.scope_spans]


def check_budget(request: TraceRequest, max_spans: int, max_attributes: int) -> int:
    """Count the spans and attributes (each resource's once, each span's) before any is
    mapped; 413 naming the limit and its setting if either is over. Returns the spans."""
    spans = attributes = 0
    plain = isinstance(request, JsonRequest)
    for resource_attributes, scopes in _layout(request):
        attributes += len(resource_attributes)
        for scope in scopes:
            spans += len(scope)
            if spans > max_spans:
                raise PayloadTooLarge(f"the request holds more than {max_spans} spans, the"
                                      " limit (ETT_OTLP_MAX_SPANS); send fewer per request")
            for span in scope:
                attributes += len(span.get("attributes", ()) if plain else span.attributes)
        if attributes > max_attributes:
            break
    if attributes > max_attributes:
        raise PayloadTooLarge(f"the request holds more than {max_attributes} attributes"
                              " (resources' and spans'), the limit (ETT_OTLP_MAX_ATTRIBUTES);"
                              " send fewer per request")
    return spans


def spans_of(request: TraceRequest) -> Iterator[SpanRecord]:
    """Every span of the request in body order, with its resource's attributes merged in."""
    if isinstance(request, JsonRequest):
        for resource_attributes, scopes in _layout(request):
            resource = _json_attributes(resource_attributes)
            for scope in scopes:
                for span in scope:
                    status = span.get("status", {})
                    yield SpanRecord(
                        trace_id=span.get("trace_id", b"").hex(),
                        span_id=span.get("span_id", b"").hex(),
                        parent_span_id=span.get("parent_span_id", b"").hex(),
                        name=span.get("name", ""), start_ns=span.get("start_time_unix_nano", 0),
                        end_ns=span.get("end_time_unix_nano", 0),
                        error=status.get("code", 0) == Status.STATUS_CODE_ERROR,
                        status_message=status.get("message", ""),
                        attributes=ChainMap(_json_attributes(span.get("attributes", [])),
                                            resource))
        return
    for resource_attributes, scopes in _layout(request):
        resource = _attributes(resource_attributes)
        for scope in scopes:
            for span in scope:
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
