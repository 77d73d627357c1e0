"""POST /v1/traces against the real app and a real PostgreSQL: OTLP spans become the same
events, results and answers as /v1/events."""

from __future__ import annotations

import gzip
import os

import orjson
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from sqlalchemy import text

from service.wire import otlp
from service.wire.span_mapping import SpanMapping
from service.wire.spans import events_of, rfc3339
from tests.wire.otlp_spans import (
    SECOND_NS,
    as_otlp_json,
    base_ns,
    one_logger_job,
    request_of,
    span,
)

PROTO = {"Content-Type": otlp.PROTOBUF}


def resource(job_id: str) -> dict:
    return {"ett__job_id": job_id, "ett__model": "llama-7b", "ett__team": "research"}


def count(engine, job_id: str) -> int:
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM events WHERE job_id = :j"),
                            {"j": job_id}).scalar_one()


def result_of(api, app_context, job_id: str) -> dict:
    app_context.aggregator.run_pass()
    got = api.get(f"/v1/jobs/{job_id}")
    assert got.status_code == 200, got.text
    return got.json()


def comparable(result: dict) -> dict:
    return {k: v for k, v in result.items() if k not in ("job_id", "computed_at", "as_of")}


def test_protobuf_spans_are_stored_and_a_resend_changes_nothing(api, db_engine) -> None:
    body = request_of(one_logger_job(base_ns()), **resource("job-a")).SerializeToString()
    r = api.post("/v1/traces", content=body, headers=PROTO)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == otlp.PROTOBUF
    reply = ExportTraceServiceResponse.FromString(r.content)
    # Only the warning about the unmapped `iteration` span; nothing rejected.
    assert reply.partial_success.rejected_spans == 0
    assert "1 spans matched no mapping rule" in reply.partial_success.error_message
    stored = count(db_engine, "job-a")
    # application: allocated + released; 5 phase spans: start + end; 2 sync saves: checkpoint.
    assert stored == 2 + 5 * 2 + 2
    again = api.post("/v1/traces", content=body, headers=PROTO)
    assert again.status_code == 200 and count(db_engine, "job-a") == stored


def test_spans_give_the_same_result_as_the_same_phases_sent_as_events(api, app_context) -> None:
    """By hand (otlp_spans.one_logger_job): held 100 s at 8 GPUs; initialization 8 s;
    wasted 9 s (saves 30-35, 60-64); effective 76 s; unattributed 7 s (0-2, 95-100)."""
    base = base_ns()
    req = request_of(one_logger_job(base), **resource("job-spans"))
    assert api.post("/v1/traces", content=req.SerializeToString(), headers=PROTO).status_code == 200
    # The same phases as /v1/events: what the mapping makes, under another job id.
    events = [dict(e, job_id="job-events") for _, e in events_of(
        otlp.spans_of(req), SpanMapping()).events]
    for e in events:
        e["event_id"] = e["event_id"][:-12] + os.urandom(6).hex()
    assert api.post("/v1/events", json={"events": events}).json()["accepted"] == len(events)
    from_spans = result_of(api, app_context, "job-spans")
    from_events = result_of(api, app_context, "job-events")
    assert comparable(from_spans) == comparable(from_events)
    assert from_spans["held_seconds"] == 100
    assert from_spans["components"]["initialization"] == 8
    assert from_spans["components"]["wasted_training"] == 9
    assert from_spans["components"]["effective_training"] == 76
    assert from_spans["components"]["unattributed"] == 7
    assert from_spans["state"] == "completed"


def test_an_error_application_span_is_a_failure_with_lost_progress(api, app_context) -> None:
    """Failure at 100 s; last durable snapshot at 60 s; training after it ran 64-95 s:
    31 s lost, so effective 76 - 31 = 45 s and wasted 9 + 31 = 40 s."""
    req = request_of(one_logger_job(base_ns(), failed=True), **resource("job-fail"))
    assert api.post("/v1/traces", content=req.SerializeToString(), headers=PROTO).status_code == 200
    result = result_of(api, app_context, "job-fail")
    assert result["level1"]["nof"] == 1
    assert result["level1"]["nof_by_cause"]["infra"] == 1
    assert result["phases"]["lost_progress"] == 31
    assert result["components"]["effective_training"] == 45
    assert result["components"]["wasted_training"] == 40


def test_otlp_json_with_hex_ids_and_gzip_is_accepted_the_same_way(api, db_engine) -> None:
    req = request_of(one_logger_job(base_ns()), **resource("job-json"))
    r = api.post("/v1/traces", content=gzip.compress(orjson.dumps(as_otlp_json(req))),
                 headers={"Content-Type": otlp.JSON, "Content-Encoding": "gzip"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == otlp.JSON
    assert r.json()["partialSuccess"]["errorMessage"].endswith("and were ignored")
    stored = count(db_engine, "job-json")
    # The protobuf encoding of the same spans is a duplicate of every event.
    api.post("/v1/traces", content=req.SerializeToString(), headers=PROTO)
    assert stored == 14 and count(db_engine, "job-json") == stored


def test_bad_spans_are_rejected_and_counted_while_good_ones_are_stored(api, db_engine) -> None:
    base = base_ns()
    trace = os.urandom(16)
    req = request_of([
        span("training_loop", 0, 10, base=base, trace_id=trace),
        span("training_loop", 0, 10, base=base, trace_id=trace, ett__job_id="bad job id!"),
        span("checkpoint_save_sync", 20, 10, base=base, trace_id=trace),
        span("application", 0, 30, base=base, trace_id=trace),  # no ett.gpus
    ], **resource("job-partial"))
    r = api.post("/v1/traces", content=orjson.dumps(as_otlp_json(req)),
                 headers={"Content-Type": otlp.JSON})
    assert r.status_code == 200, r.text
    partial = r.json()["partialSuccess"]
    assert partial["rejectedSpans"] == "3"  # int64 is a string in protobuf JSON
    message = partial["errorMessage"]
    assert "span 1: job_id:" in message
    assert "span 2: span 'checkpoint_save_sync'" in message and "endTimeUnixNano" in message
    assert "span 3: gpus: is required for allocated" in message
    # The good span, and the application span's release (only its allocation was bad).
    assert count(db_engine, "job-partial") == 3
    with db_engine.connect() as conn:
        first = conn.execute(text("SELECT min(ts) FROM events WHERE job_id = 'job-partial'"))
        assert first.scalar_one().isoformat() == rfc3339(base)


@pytest.mark.parametrize(("headers", "body", "status", "detail"), [
    ({"Content-Type": "text/plain"}, b"x", 415, "'text/plain' is not supported"),
    ({}, b"x", 415, "'(none)' is not supported"),
    (PROTO, b"\x0a\xff", 400, "not an OTLP ExportTraceServiceRequest"),
    ({"Content-Type": otlp.JSON}, b"{not json", 400, "not valid JSON"),
    ({**PROTO, "Content-Encoding": "gzip"}, b"plain", 400, "not a valid compressed stream"),
    ({**PROTO, "Content-Encoding": "zstd"}, b"plain", 415, "Content-Encoding 'zstd'"),
])
def test_bodies_that_are_not_otlp_are_refused_whole(api, db_engine, headers, body, status,
                                                    detail) -> None:
    r = api.post("/v1/traces", content=body, headers=headers)
    assert r.status_code == status and detail in r.json()["detail"], r.text
    with db_engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM events")).scalar_one() == 0


def test_traces_need_a_writer_token(api) -> None:
    body = request_of(one_logger_job(base_ns()), **resource("job-x")).SerializeToString()
    r = api.post("/v1/traces", content=body, headers={**PROTO, "Authorization": "Bearer nope"})
    assert r.status_code == 401


def test_a_gzip_bomb_is_refused_before_it_grows(api) -> None:
    bomb = gzip.compress(b"\0" * (6 * 1024 * 1024))
    r = api.post("/v1/traces", content=bomb, headers={**PROTO, "Content-Encoding": "gzip"})
    assert r.status_code == 413 and "decompressed body exceeds" in r.json()["detail"]


def test_times_keep_whole_microseconds() -> None:
    assert rfc3339(1_700_000_000 * SECOND_NS + 1_234_567) == "2023-11-14T22:13:20.001234+00:00"


def test_spans_share_the_ingest_admission_limit_and_get_503_with_retry_after(
        db_engine) -> None:
    from fastapi.testclient import TestClient

    from service.api.app import create_app
    from tests.conftest import ADMIN_TOKEN, make_context

    app_context = make_context(db_engine, ingest_max_in_flight_bytes=1024)
    body = request_of(one_logger_job(base_ns()) * 4, **resource("job-big")).SerializeToString()
    assert len(body) > 1024
    with TestClient(create_app(app_context)) as client:
        r = client.post("/v1/traces", content=body,
                        headers={**PROTO, "Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert r.status_code == 503 and r.headers["retry-after"] == "1", r.text
    assert "bytes of request bodies in flight" in r.json()["detail"]
    assert count(db_engine, "job-big") == 0


def _token(engine, role: str, team: str | None = None, patterns: tuple[str, ...] = ()) -> str:
    from service.access import tokens

    with engine.begin() as conn:
        _info, secret = tokens.create_token(conn, role, team, patterns)
    return f"Bearer {secret}"


def test_spans_obey_the_token_scopes_of_events(api, db_engine) -> None:
    base, trace = base_ns(), os.urandom(16)
    writer = _token(db_engine, "writer", "ads", ("ads_*",))
    mine = span("training_loop", 0, 10, base=base, trace_id=trace, ett__model="ads_ctr",
                ett__team="ads")
    theirs = span("training_loop", 0, 10, base=base, trace_id=trace, ett__model="search_rank",
                  ett__team="ads")
    only_theirs = request_of([theirs], ett__job_id="job-scope").SerializeToString()
    r = api.post("/v1/traces", content=only_theirs, headers={**PROTO, "Authorization": writer})
    assert r.status_code == 403 and "may not write model 'search_rank'" in r.json()["detail"]
    mixed = request_of([mine, theirs], ett__job_id="job-scope").SerializeToString()
    r = api.post("/v1/traces", content=mixed, headers={**PROTO, "Authorization": writer})
    reply = ExportTraceServiceResponse.FromString(r.content)
    assert r.status_code == 200 and reply.partial_success.rejected_spans == 1
    assert "span 1: model: this token may not write model 'search_rank'" in (
        reply.partial_success.error_message)
    assert count(db_engine, "job-scope") == 2
    reader = _token(db_engine, "reader")
    r = api.post("/v1/traces", content=mixed, headers={**PROTO, "Authorization": reader})
    assert r.status_code == 403 and r.json()["detail"] == "a reader token may not post spans"


def test_a_seeded_trainer_repeating_its_span_ids_on_a_restart_reads_two_attempts(
        api, app_context) -> None:
    """OpenTelemetry's default id generator draws from `random`, so
    a trainer that seeds it exports the same trace and span ids on every restart. Attempt 1
    (30 min later, the same ids) is an attempt of its own, not a silent duplicate of attempt
    0 (which would read one attempt, 100 s)."""
    base = base_ns()
    first = one_logger_job(base, failed=True)
    restart = []
    for s in first:
        again = type(s)()
        again.CopyFrom(s)  # the same trace and span ids
        again.start_time_unix_nano += 1800 * SECOND_NS
        again.end_time_unix_nano += 1800 * SECOND_NS
        restart.append(again)
    for spans, attempt in ((first, 0), (restart, 1)):
        req = request_of(spans, **resource("job-seeded"), ett__attempt=attempt)
        r = api.post("/v1/traces", content=req.SerializeToString(), headers=PROTO)
        assert r.status_code == 200, r.text
        assert ExportTraceServiceResponse.FromString(r.content).partial_success.rejected_spans == 0
    result = result_of(api, app_context, "job-seeded")
    assert [a["attempt"] for a in result["attempts"]] == [0, 1]
    assert [a["held_seconds"] for a in result["attempts"]] == [100, 100]
    assert result["held_seconds"] == 200


# --- the work budget, and the work off the event loop -----------------


@pytest.fixture
def small_budget(db_engine):
    from fastapi.testclient import TestClient

    from service.api.app import create_app
    from tests.conftest import ADMIN_TOKEN, make_context

    app_context = make_context(db_engine, otlp_max_spans=10, otlp_max_attributes=50)
    with TestClient(create_app(app_context)) as client:
        client.headers["Authorization"] = f"Bearer {ADMIN_TOKEN}"
        yield client


def _unmapped(n: int, base: int) -> list:
    trace = os.urandom(16)
    return [span("dataloader.next", i, i + 0.5, base=base, trace_id=trace) for i in range(n)]


def test_more_spans_than_the_budget_is_a_413_naming_the_setting(small_budget) -> None:
    base = base_ns()
    ok = small_budget.post("/v1/traces", headers=PROTO, content=request_of(
        _unmapped(10, base), **resource("budget")).SerializeToString())
    assert ok.status_code == 200, ok.text
    r = small_budget.post("/v1/traces", headers=PROTO, content=request_of(
        _unmapped(11, base), **resource("budget")).SerializeToString())
    assert r.status_code == 413
    assert "more than 10 spans" in r.json()["detail"]
    assert "ETT_OTLP_MAX_SPANS" in r.json()["detail"]


def test_more_attributes_than_the_budget_is_a_413_naming_the_setting(small_budget) -> None:
    # A resource's attributes count once, however many spans share them.
    many = {f"host.attr.{i}": "x" for i in range(45)}
    base = base_ns()
    ok = small_budget.post("/v1/traces", headers=PROTO, content=request_of(
        _unmapped(2, base), **resource("budget"), **many).SerializeToString())
    assert ok.status_code == 200, ok.text
    many.update({f"host.more.{i}": "x" for i in range(10)})
    r = small_budget.post("/v1/traces", headers=PROTO, content=request_of(
        _unmapped(2, base), **resource("budget"), **many).SerializeToString())
    assert r.status_code == 413
    assert "more than 50 attributes" in r.json()["detail"]
    assert "ETT_OTLP_MAX_ATTRIBUTES" in r.json()["detail"]


def test_resource_attributes_are_shared_by_the_spans_not_copied() -> None:
    base = base_ns()
    req = request_of(_unmapped(3, base), **resource("shared"), **{"host.name": "n1"})
    spans = list(otlp.spans_of(req))
    shared = {id(m) for s in spans for m in s.attributes.maps[1:]}
    assert len(shared) == 1
    assert spans[0].attributes["host.name"] == "n1"


@pytest.mark.parametrize("media", [otlp.PROTOBUF, otlp.JSON])
def test_spans_are_decoded_and_mapped_off_the_event_loop(api, monkeypatch, media) -> None:
    from service.work_pool import WorkPool

    ran: list[tuple[str, bool]] = []
    real = WorkPool.run

    async def run(self, fn, *args, **kwargs):
        ran.append((fn.__name__, self.processes))
        return await real(self, fn, *args, **kwargs)

    monkeypatch.setattr(WorkPool, "run", run)
    req = request_of(one_logger_job(base_ns()), **resource("off-loop"))
    body = (req.SerializeToString() if media == otlp.PROTOBUF
            else orjson.dumps(as_otlp_json(req)))
    r = api.post("/v1/traces", headers={"Content-Type": media}, content=body)
    assert r.status_code == 200, r.text
    # In a worker process: tests/wire/test_work_pool.py shows its jobs run in another one.
    assert ran == [("decide_spans", True)]
