"""OTLP JSON's fast reading equals protobuf's own parser (`json_format`, the reference): the
same spans for every document it reads, the same error for every document it refuses, and
the reference decides whatever the fast reading cannot vouch for."""

from __future__ import annotations

import os
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.errors import EttError
from service.wire import otlp
from tests.wire.otlp_spans import as_otlp_json, base_ns, one_logger_job, request_of, span


def outcome(doc: Any, reference: bool) -> tuple[str, Any]:
    """The spans the document stands for, or the error it is refused with."""
    try:
        request = otlp.parse_request(orjson.dumps(doc), otlp.JSON, reference=reference)
        otlp.check_budget(request, 10**6, 10**6)
        return "spans", list(otlp.spans_of(request))
    except EttError as exc:
        return type(exc).__name__, exc.message


def fast_reads(doc: Any) -> bool:
    return isinstance(otlp.parse_request(orjson.dumps(doc), otlp.JSON), otlp.JsonRequest)


# --- canonical documents, as exporters write them -------------------------------------------

def name(camel: str, snake: str) -> st.SearchStrategy[str]:
    return st.sampled_from([camel, snake])


int64s = st.integers(-(2**63), 2**63 - 1)
uint64s = st.integers(0, 2**64 - 1)
as_text = st.booleans()


@st.composite
def a_uint64(draw: st.DrawFn) -> Any:
    value = draw(uint64s)
    return str(value) if draw(as_text) else value


def any_values(max_leaves: int = 4) -> st.SearchStrategy[dict[str, Any]]:
    leaves = st.one_of(
        st.builds(lambda v: {"stringValue": v}, st.text(max_size=8)),
        st.builds(lambda v: {"boolValue": v}, st.booleans()),
        st.builds(lambda v, t: {"intValue": str(v) if t else v}, int64s, as_text),
        st.builds(lambda v: {"doubleValue": v},
                  st.floats(allow_nan=False, allow_infinity=False)),
        st.builds(lambda v: {"bytesValue": v},
                  st.binary(max_size=6).map(lambda b: __import__("base64").b64encode(b).decode())),
        st.just({}),
    )
    return st.recursive(leaves, lambda inner: st.one_of(
        st.builds(lambda vs: {"arrayValue": {"values": vs}}, st.lists(inner, max_size=3)),
        st.builds(lambda kvs: {"kvlistValue": {"values": kvs}},
                  st.lists(key_values(inner), max_size=3)),
    ), max_leaves=max_leaves)


def key_values(values: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    keys = st.sampled_from(["ett.job_id", "ett.model", "ett.attempt", "ett.step", "host", "k"])
    return st.builds(lambda k, v: {"key": k, "value": v}, keys, values)


def hex_id(size: int) -> st.SearchStrategy[str]:
    return st.binary(min_size=size, max_size=size).map(bytes.hex)


@st.composite
def spans(draw: st.DrawFn) -> dict[str, Any]:
    out: dict[str, Any] = {
        draw(name("traceId", "trace_id")): draw(hex_id(16)),
        draw(name("spanId", "span_id")): draw(hex_id(8)),
        "name": draw(st.sampled_from(["training_loop", "application", "dist_init", "x"])),
        draw(name("startTimeUnixNano", "start_time_unix_nano")): draw(a_uint64()),
        draw(name("endTimeUnixNano", "end_time_unix_nano")): draw(a_uint64()),
        "attributes": draw(st.lists(key_values(any_values()), max_size=3)),
    }
    if draw(st.booleans()):
        out[draw(name("parentSpanId", "parent_span_id"))] = draw(hex_id(8))
    if draw(st.booleans()):
        out["status"] = {"code": draw(st.sampled_from([0, 1, 2, "STATUS_CODE_ERROR",
                                                       "STATUS_CODE_OK"])),
                         "message": draw(st.text(max_size=6))}
    if draw(st.booleans()):
        out["kind"] = draw(st.sampled_from(["SPAN_KIND_INTERNAL", 2]))
        out["events"] = [{"timeUnixNano": draw(a_uint64()), "name": "e",
                          "attributes": draw(st.lists(key_values(any_values(3)), max_size=2))}]
        out["links"] = [{"traceId": draw(hex_id(16)), "spanId": draw(hex_id(8)),
                         "flags": draw(st.integers(0, 2**32 - 1))}]
        out[draw(name("droppedAttributesCount", "dropped_attributes_count"))] = 3
    return out


@st.composite
def documents(draw: st.DrawFn, min_spans: int = 0) -> dict[str, Any]:
    resources = []
    for _ in range(draw(st.integers(min_spans, 2))):
        resources.append({
            "resource": {"attributes": draw(st.lists(key_values(any_values(4)), max_size=3))},
            draw(name("scopeSpans", "scope_spans")): [
                {"scope": {"name": "s", "version": "1"},
                 "spans": draw(st.lists(spans(), min_size=min_spans, max_size=2)),
                 draw(name("schemaUrl", "schema_url")): "u"}
                for _ in range(draw(st.integers(min_spans, 2)))],
        })
    return {draw(name("resourceSpans", "resource_spans")): resources}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_the_fast_reading_takes_canonical_documents_and_equals_the_reference(doc) -> None:
    assert fast_reads(doc)
    assert outcome(doc, reference=False) == outcome(doc, reference=True)


# --- documents spoiled in one place: each is read (or refused) as the reference does --------

SPOILERS = st.sampled_from([
    None, "", "zz", "0xab", "1.5", " 7", "007", "-1", 1.5, 2.0, True, False, 0, -1, 2**64 - 1,
    "18446744073709551616", 2**31, [], [None], {}, {"a": 1}, [{"traceId": "zz"}], {"trace_id": 12},
    "STATUS_CODE_NOPE", "SPAN_KIND_SERVER", "AAEC", "!!", "[ext.x]",
])


def _paths(node: Any, path: tuple = ()) -> list[tuple]:
    """Every place in the document: dict keys and list items."""
    out = [path]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out += _paths(value, (*path, index))
    return out


def _spoil(doc: Any, path: tuple, value: Any, as_key: str | None) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(doc, dict):
        out = dict(doc)
        if as_key is not None and not rest:
            out[as_key] = value  # a key beside it: unknown, an alias or an extension
        else:
            out[head] = _spoil(doc[head], rest, value, as_key)
        return out
    out_list = list(doc)
    out_list[head] = _spoil(doc[head], rest, value, as_key)
    return out_list


EXTRA_KEYS = st.sampled_from([None, None, "traceId", "trace_id", "futureField", "[ext.x]",
                              "stringValue", "int_value", "name", "span_id", "kind"])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents(min_spans=1), st.data())
def test_a_document_spoiled_anywhere_is_read_or_refused_as_the_reference_does(doc, data) -> None:
    for path in _paths(doc):
        for _ in range(2):
            spoiled = _spoil(doc, path, data.draw(SPOILERS), data.draw(EXTRA_KEYS))
            assert outcome(spoiled, reference=False) == outcome(spoiled, reference=True)


def test_values_nested_at_and_past_the_limits_are_refused_as_the_reference_does() -> None:
    for levels in (15, 16, 17, 18, 19, 30):
        value: dict[str, Any] = {"stringValue": "x"}
        for _ in range(levels):
            value = {"kvlistValue": {"values": [{"key": "k", "value": value}]}}
        doc = {"resourceSpans": [{"scopeSpans": [{"spans": [
            {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "n",
             "attributes": [{"key": "deep", "value": value}]}]}]}]}
        assert outcome(doc, reference=False) == outcome(doc, reference=True), levels
        # An unknown field nested as deep is checked as the reference checks it, too.
        ignored = {"resourceSpans": [], "future": {"values": [value]}}
        assert outcome(ignored, reference=False) == outcome(ignored, reference=True), levels


def test_an_exported_job_is_read_by_the_fast_reading_as_protobuf_reads_it() -> None:
    req = request_of(one_logger_job(base_ns()), ett__job_id="j", ett__model="m")
    req.resource_spans[0].scope_spans[0].spans.append(
        span("x", 0, 1, base=base_ns(), trace_id=os.urandom(16), error="boom"))
    doc = as_otlp_json(req)
    assert fast_reads(doc)
    from_proto = list(otlp.spans_of(otlp.parse_request(req.SerializeToString(), otlp.PROTOBUF)))
    assert outcome(doc, reference=False) == ("spans", from_proto)
    assert from_proto[-1].error and from_proto[-1].status_message == "boom"
