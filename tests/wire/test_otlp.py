"""OTLP bodies -> span records -> events: decoding, the mapping and its configuration."""

from __future__ import annotations

import os

import orjson
import pytest
import yaml

from service.errors import BadRequest, ConfigError, UnsupportedMediaType
from service.wire import otlp
from service.wire.span_mapping import SpanMapping, SpanRule, load_mapping, mapping_from_doc
from service.wire.spans import event_id, events_of, rfc3339
from tests.wire.otlp_spans import (
    SECOND_NS,
    as_otlp_json,
    base_ns,
    one_logger_job,
    request_of,
    span,
)

RESOURCE = {"ett__job_id": "job-otlp", "ett__model": "llama-7b", "ett__team": "research",
            "ett__attempt": 2}


def decoded(req, media: str = otlp.PROTOBUF) -> list[otlp.SpanRecord]:
    body = req.SerializeToString() if media == otlp.PROTOBUF else orjson.dumps(as_otlp_json(req))
    return list(otlp.spans_of(otlp.parse_request(body, media)))


def test_protobuf_and_otlp_json_decode_to_the_same_spans() -> None:
    req = request_of(one_logger_job(base_ns()), **RESOURCE)
    from_proto, from_json = decoded(req), decoded(req, otlp.JSON)
    assert from_proto == from_json
    assert len(from_proto[0].trace_id) == 32 and len(from_proto[0].span_id) == 16
    assert from_proto[-1].name == "application" and from_proto[-1].attributes["ett.gpus"] == 8
    assert from_proto[0].attributes["ett.job_id"] == "job-otlp"


def test_span_attributes_win_over_resource_attributes() -> None:
    base = base_ns()
    req = request_of([span("training_loop", 0, 1, base=base, trace_id=os.urandom(16),
                           ett__job_id="from-span")], **RESOURCE)
    assert decoded(req)[0].attributes["ett.job_id"] == "from-span"


def test_the_one_logger_job_maps_to_the_events_its_spans_stand_for() -> None:
    base = base_ns()
    out = events_of(decoded(request_of(one_logger_job(base), **RESOURCE)), SpanMapping())
    assert out.rejected == [] and out.ignored == 1  # the `iteration` span
    kinds = [(e["type"], e.get("phase")) for _, e in out.events]
    assert kinds.count(("phase_start", "checkpoint_save")) == 3
    assert kinds.count(("checkpoint", None)) == 2  # the sync saves only: async is not durable
    assert ("phase_start", "train_module_creation") in kinds
    assert ("phase_start", "training") in kinds
    allocated = next(e for _, e in out.events if e["type"] == "allocated")
    assert allocated["gpus"] == 8 and allocated["attempt"] == 2 and allocated["team"] == "research"
    released = next(e for _, e in out.events if e["type"] == "released")
    assert released["attrs"] == {"reason": "completed"}
    # The first sync save ran 30-35 s: durable at 35 s with the state of 30 s.
    checkpoint = next(e for _, e in out.events if e["type"] == "checkpoint")
    assert checkpoint["ts"] == otlp_ts(base, 35) and checkpoint["attrs"]["snapshot_ts"] == otlp_ts(
        base, 30)
    background = [e for _, e in out.events if e.get("attrs") == {"background": True}]
    assert len(background) == 1 and background[0]["ts"] == otlp_ts(base, 80)


def otlp_ts(base: int, seconds: int) -> str:
    return rfc3339(base + seconds * SECOND_NS)


def test_an_application_span_with_error_status_is_a_failure_then_a_failed_release() -> None:
    out = events_of(decoded(request_of(one_logger_job(base_ns(), failed=True), **RESOURCE)),
                    SpanMapping())
    failure = next(e for _, e in out.events if e["type"] == "failure")
    assert failure["attrs"] == {"cause": "infra", "reason": "CUDA error: an illegal memory access"}
    released = next(e for _, e in out.events if e["type"] == "released")
    assert released["attrs"] == {"reason": "failed"} and released["ts"] == failure["ts"]


def test_event_ids_are_the_same_for_a_resent_span_and_differ_by_role() -> None:
    req = request_of(one_logger_job(base_ns()), **RESOURCE)
    first = [e["event_id"] for _, e in events_of(decoded(req), SpanMapping()).events]
    again = [e["event_id"] for _, e in events_of(decoded(req, otlp.JSON), SpanMapping()).events]
    assert first == again and len(set(first)) == len(first)
    ids = "a" * 32, "b" * 16
    assert event_id(*ids, "start", "j", 0) != event_id(*ids, "end", "j", 0)
    # A seeded trainer repeats its ids on a restart: the job and attempt keep them apart.
    assert event_id(*ids, "start", "j", 0) != event_id(*ids, "start", "j", 1)
    assert event_id(*ids, "start", "j", 0) != event_id(*ids, "start", "k", 0)


def test_a_span_without_job_or_model_is_rejected_naming_the_attribute() -> None:
    req = request_of([span("training_loop", 0, 1, base=base_ns(), trace_id=os.urandom(16))],
                     ett__model="m")
    out = events_of(decoded(req), SpanMapping())
    span_id = req.resource_spans[0].scope_spans[0].spans[0].span_id.hex()
    assert out.events == []
    assert out.rejected == [
        (0, f"span 'training_loop' ({span_id}): no job_id (attribute ett.job_id)")]


def test_the_phase_attribute_names_the_phase_of_any_span() -> None:
    req = request_of([span("my.step", 0, 1, base=base_ns(), trace_id=os.urandom(16),
                           ett__phase="data_stall")], **RESOURCE)
    out = events_of(decoded(req), SpanMapping())
    assert [(e["type"], e["phase"]) for _, e in out.events] == [
        ("phase_start", "data_stall"), ("phase_end", "data_stall")]


def test_a_step_attribute_rides_on_the_span_end_event() -> None:
    trace = os.urandom(16)
    req = request_of([
        span("application", 0, 10, base=base_ns(), trace_id=trace, ett__gpus=8,
             ett__step="1200"),
        span("training_loop", 1, 9, base=base_ns(), trace_id=trace, ett__step=1180),
        span("dist_init", 0, 1, base=base_ns(), trace_id=trace),
    ], **RESOURCE)
    out = events_of(decoded(req), SpanMapping())
    steps = {(e["type"], e.get("phase")): (e.get("attrs") or {}).get("step")
             for _, e in out.events}
    assert steps == {("allocated", None): None, ("released", None): 1200,
                     ("phase_start", "training"): None, ("phase_end", "training"): 1180,
                     ("phase_start", "process_group_init"): None,
                     ("phase_end", "process_group_init"): None}


def test_a_mapping_file_renames_attributes_and_adds_span_rules(tmp_path) -> None:
    path = tmp_path / "mapping.yaml"
    path.write_text(yaml.safe_dump({
        "attributes": {"job_id": ["k8s.job.name", "ett.job_id"], "model": "model.name"},
        "spans": {"fit": "training", "save": {"phase": "checkpoint_save", "checkpoint": True},
                  "launcher": {"attempt": True}},
    }))
    mapping = load_mapping(path)
    assert mapping.spans["fit"] == SpanRule(phase="training")
    assert mapping.spans["application"].attempt  # the one-logger names stay unless switched off
    req = request_of([span("fit", 0, 1, base=base_ns(), trace_id=os.urandom(16))],
                     k8s__job__name="train-42", model__name="gpt")
    out = events_of(decoded(req), mapping)
    assert {(e["job_id"], e["model"]) for _, e in out.events} == {("train-42", "gpt")}
    assert "application" not in mapping_from_doc({"one_logger": False}).spans


@pytest.mark.parametrize(("doc", "message"), [
    ({"spans": {"x": {"phase": "training", "attempt": True}}}, "either a phase or attempt"),
    ({"spans": {"x": {"phse": "training"}}}, "unknown keys ['phse']"),
    ({"attributes": {"job": "x"}}, "attributes.job: not one of"),
    ({"colour": 1}, "unknown keys ['colour']"),
    ({"default_attempt": -1}, "default_attempt: must be an integer >= 0"),
])
def test_a_bad_mapping_file_is_refused_naming_the_key(doc, message) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        mapping_from_doc(doc)


@pytest.mark.parametrize(("media", "body", "message"), [
    (otlp.PROTOBUF, b"\xff\xff\xff", "not an OTLP ExportTraceServiceRequest"),
    (otlp.JSON, b"{", "not valid JSON"),
    (otlp.JSON, b"[]", "must be a JSON object"),
    (otlp.JSON, b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}',
     "traceId: 'zz' is not a hex id"),
    (otlp.JSON, b'{"resourceSpans": 3}', "not an OTLP ExportTraceServiceRequest"),
])
def test_bad_bodies_are_refused_with_what_is_wrong(media, body, message) -> None:
    with pytest.raises(BadRequest, match=message):
        otlp.parse_request(body, media)


def test_unknown_json_fields_are_ignored_as_the_otlp_specification_asks() -> None:
    body = b'{"resourceSpans": [], "futureField": {"a": 1}}'
    assert list(otlp.spans_of(otlp.parse_request(body, otlp.JSON))) == []


def test_only_protobuf_and_json_media_types_are_accepted() -> None:
    assert otlp.media_type_of("application/json; charset=utf-8") == otlp.JSON
    with pytest.raises(UnsupportedMediaType, match="'text/plain' is not supported"):
        otlp.media_type_of("text/plain")
