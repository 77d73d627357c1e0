"""The OpenTelemetry Python SDK's own OTLP/HTTP exporter (protobuf, gzip) sends a job's spans
to a real `ett serve`; the job is measured exactly like the same phases written by hand as
/v1/events, and re-exporting the spans changes nothing."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode
from sqlalchemy import text

from service.store.engine import make_engine
from tests.factories import event

pytestmark = pytest.mark.slow

BASE = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)


def ns(seconds: float) -> int:
    return int((BASE + timedelta(seconds=seconds)).timestamp() * 1_000_000) * 1000


def export_job(service: Any, job_id: str, *, failed: bool) -> InMemorySpanExporter:
    """One-logger's spans of an attempt (the layout of tests/wire/otlp_spans.one_logger_job),
    exported by the SDK; the in-memory copy keeps them for re-sending."""
    kept = InMemorySpanExporter()
    exporter = OTLPSpanExporter(endpoint=service.url + "/v1/traces", headers=service.headers(),
                                compression=Compression.Gzip)
    provider = TracerProvider(resource=Resource.create(
        {"ett.job_id": job_id, "ett.model": "llama-7b", "ett.team": "research",
         "ett.attempt": 0}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.add_span_processor(SimpleSpanProcessor(kept))
    tracer = provider.get_tracer("ett-test")
    app = tracer.start_span("application", start_time=ns(0), attributes={"ett.gpus": 8})
    inside = trace.set_span_in_context(app)
    for name, t0, t1 in (("model_initialization", 2, 10), ("checkpoint_save_sync", 30, 35),
                         ("checkpoint_save_sync", 60, 64), ("checkpoint_save_async", 80, 82),
                         ("training_loop", 10, 95), ("iteration", 11, 12)):
        tracer.start_span(name, context=inside, start_time=ns(t0)).end(end_time=ns(t1))
    if failed:
        app.set_status(Status(StatusCode.ERROR, "NCCL watchdog timeout"))
    app.end(end_time=ns(100))
    provider.shutdown()
    return kept


def by_hand(job_id: str, *, failed: bool) -> list[dict[str, Any]]:
    """The same phases written as events (minutes in factories.event: seconds / 60)."""
    def e(type_: str, s: float, **kw: Any) -> dict[str, Any]:
        return event(type_, s / 60, job_id=job_id, model="llama-7b", base=BASE, team="research",
                     **kw)
    events = [
        e("allocated", 0, gpus=8),
        e("phase_start", 2, phase="train_module_creation"),
        e("phase_end", 10, phase="train_module_creation"),
        e("phase_start", 10, phase="training"),
        e("phase_start", 30, phase="checkpoint_save"), e("phase_end", 35, phase="checkpoint_save"),
        e("checkpoint", 35, attrs={"snapshot_ts": (BASE + timedelta(seconds=30)).isoformat()}),
        e("phase_start", 60, phase="checkpoint_save"), e("phase_end", 64, phase="checkpoint_save"),
        e("checkpoint", 64, attrs={"snapshot_ts": (BASE + timedelta(seconds=60)).isoformat()}),
        e("phase_start", 80, phase="checkpoint_save", attrs={"background": True}),
        e("phase_end", 82, phase="checkpoint_save"),
        e("phase_end", 95, phase="training"),
    ]
    if failed:
        events.append(e("failure", 100, attrs={"cause": "infra"}))
    events.append(e("released", 100, attrs={"reason": "failed" if failed else "completed"}))
    return events


def result(service: Any, job_id: str) -> dict[str, Any]:
    assert httpx.post(service.url + "/v1/aggregate", headers=service.headers(),
                      timeout=60).status_code == 200
    got = httpx.get(f"{service.url}/v1/jobs/{job_id}", headers=service.headers(), timeout=30)
    assert got.status_code == 200, got.text
    return {k: v for k, v in got.json().items() if k not in ("job_id", "computed_at", "as_of")}


@pytest.mark.parametrize("failed", [False, True])
def test_sdk_exported_spans_are_measured_like_the_same_phases_as_events(service, failed) -> None:
    job = f"otel-{uuid.uuid4().hex[:8]}"
    kept = export_job(service, job, failed=failed)
    posted = httpx.post(service.url + "/v1/events", headers=service.headers(),
                        json={"events": by_hand(job + "-events", failed=failed)}, timeout=30)
    assert posted.status_code == 202 and not posted.json()["rejected"], posted.text
    from_spans = result(service, job)
    assert from_spans == result(service, job + "-events")
    # By hand (tests/ingest/test_ingest_traces.py): 76 s effective, or 45 s after 31 s of lost
    # progress when the application span failed.
    want = 45 if failed else 76
    assert from_spans["components"]["effective_training"] == want
    assert from_spans["held_seconds"] == 100

    engine = make_engine(service.database_url)
    try:
        def stored() -> int:
            with engine.connect() as conn:
                return conn.execute(text("SELECT count(*) FROM events WHERE job_id = :j"),
                                    {"j": job}).scalar_one()
        before = stored()
        again = OTLPSpanExporter(endpoint=service.url + "/v1/traces", headers=service.headers())
        assert again.export(kept.get_finished_spans()) == SpanExportResult.SUCCESS
        assert stored() == before
        assert result(service, job) == from_spans
    finally:
        engine.dispose()
