"""The composition root (service.api.context): one context for `ett serve`, the tests and
`create_app`; aggregation passes announced to listeners; every default in `Settings`; the
answers documented in the OpenAPI document."""

from __future__ import annotations

from prometheus_client import generate_latest

from ett_core import Taxonomy
from service.aggregate import Aggregator, PassReport
from service.api.app import create_app
from service.api.context import build_context
from service.ingest import IngestLimits
from service.settings import Settings
from tests.conftest import ADMIN_TOKEN, make_context
from tests.factories import event


def test_the_aggregator_announces_every_pass_to_its_listeners_in_order(
        db_engine, api) -> None:
    aggregator = api.app.state.ctx.aggregator
    heard: list[tuple[str, PassReport]] = []
    aggregator.listen(lambda report: heard.append(("first", report)))
    aggregator.listen(lambda report: heard.append(("second", report)))
    assert api.post("/v1/events", json={"events": [event("heartbeat", 0)]}).status_code == 202
    first = aggregator.run_pass()
    second = aggregator.run_pass()
    assert heard == [("first", first), ("second", first), ("first", second),
                     ("second", second)]
    assert first.jobs_recomputed == 1


def test_exported_aggregates_are_refreshed_by_every_pass_of_the_contexts_aggregator(
        db_engine) -> None:
    settings = Settings(database_url="postgresql://unused", admin_token=ADMIN_TOKEN)
    ctx = build_context(settings, db_engine, export_aggregates=True)
    try:
        assert ctx.collector is not None and ctx.aggregator is not None
        assert "ett_aggregation_duration_seconds_count 0.0" in generate_latest(
            ctx.registry).decode()
        ctx.aggregator.run_pass()
        after = generate_latest(ctx.registry).decode()
        # The pass counted by the exporter's listener, beside the request metrics.
        assert "ett_aggregation_duration_seconds_count 1.0" in after
        assert "ett_http_request_duration_seconds" in after
    finally:
        ctx.close()


def test_a_context_without_the_aggregator_mounts_no_admin_routes(db_engine) -> None:
    from fastapi.testclient import TestClient

    with TestClient(create_app(make_context(db_engine, with_aggregator=False))) as client:
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        assert client.post("/v1/aggregate", headers=headers).status_code == 404
        assert client.get("/v1/models", headers=headers).status_code == 200


def test_defaults_are_the_settings_defaults(db_engine) -> None:
    settings = Settings(database_url="postgresql://unused")
    limits = IngestLimits.from_settings(settings)
    assert limits.max_in_flight == settings.ingest_max_in_flight
    assert limits.max_in_flight_per_token == settings.ingest_max_in_flight_per_token
    assert limits.ingest_max_age_s == settings.ingest_max_age.total_seconds()
    assert limits.work_queue == settings.work_queue
    bare = Aggregator(db_engine, Taxonomy.default())
    assert bare.heartbeat_timeout_us == int(settings.heartbeat_timeout_s * 1_000_000)
    assert bare.batch_jobs == settings.aggregate_batch_jobs
    changed = Settings(database_url="postgresql://unused", ingest_max_in_flight=3,
                       console_sessions_per_token=2)
    ctx = build_context(changed, db_engine, with_aggregator=False)
    assert ctx.ingestion.in_flight.max_requests == 3
    assert ctx.console.sessions.per_token == 2


def test_the_openapi_document_describes_the_answers_of_the_read_routes(api) -> None:
    doc = api.get("/openapi.json").json()
    for path, model in (("/v1/ett", "EttWindow"), ("/v1/models", "ModelsOverview"),
                        ("/v1/teams/{team}/bill", "TeamBill"), ("/v1/jobs/{job_id}", "JobDocument"),
                        ("/v1/annotations", "AnnotationPage"), ("/v1/impact", "ImpactReport"),
                        ("/v1/whatif", "WhatIf"), ("/v1/admin/quarantine", "Quarantine"),
                        ("/v1/models/{model}/checkpoint-advice", "CheckpointAdvice")):
        schema = doc["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]
        assert schema["schema"] == {"$ref": f"#/components/schemas/{model}"}, path
    groups = doc["components"]["schemas"]["EttWindow"]["properties"]["groups"]
    assert groups["items"] == {"$ref": "#/components/schemas/EttGroup"}
    assert "held_gpu_seconds" in doc["components"]["schemas"]["EttGroup"]["required"]
