"""Every body bounded and checked after the role, every date bounded, annotations limited
and paged, through the real app on PostgreSQL."""

from __future__ import annotations

import gzip
import uuid
from datetime import UTC, datetime, timedelta

import orjson
import pytest
from sqlalchemy import text

from service.access import tokens
from service.api.app import create_app
from tests.conftest import ADMIN_TOKEN


def _token(db_engine, role: str, team: str | None = None, patterns: tuple[str, ...] = ()
           ) -> dict[str, str]:
    with db_engine.begin() as conn:
        _info, secret = tokens.create_token(conn, role, team, patterns)
    return {"Authorization": f"Bearer {secret}"}


# --- no 500 for dates at the calendar's ends ------------------------------------

@pytest.mark.parametrize(("path", "params", "field"), [
    ("/v1/impact", {"baseline_end": "0001-01-02T00:00:00Z"}, "baseline_end"),
    ("/v1/impact", {"candidate_end": "0001-01-02T00:00:00Z"}, "candidate_end"),
    ("/v1/impact", {"baseline_start": "9999-12-31T00:00:00Z"}, "baseline_start"),
    ("/v1/whatif", {"component": "initialization", "reduction": 0.5,
                    "end": "0001-01-01T00:00:00Z"}, "end"),
])
def test_impact_bounds_near_year_one_are_a_422_naming_the_field(api, path, params, field
                                                                ) -> None:
    r = api.get(path, params=params)
    assert r.status_code == 422, r.text
    assert r.json()["detail"].startswith(f"{field}: ")
    assert "outside the supported range" in r.json()["detail"]


@pytest.mark.parametrize("ts", ["0001-01-01T00:00:00Z", "9999-12-31T00:00:00Z",
                                "1969-12-31T23:59:59Z"])
def test_an_annotation_ts_outside_1970_to_9000_is_a_422(api, ts) -> None:
    r = api.post("/v1/annotations", json={"title": "x", "ts": ts})
    assert r.status_code == 422, r.text
    assert r.json()["detail"].startswith("ts: ") and "supported range" in r.json()["detail"]


def test_impact_around_an_annotation_stored_at_year_one_answers(api, db_engine) -> None:
    # Stored before `ts` was bounded: comparing around it must still answer.
    with db_engine.begin() as conn:
        old = conn.execute(text("INSERT INTO annotations (ts, title) VALUES"
                                " ('0001-01-01T00:00:00Z', 'old') RETURNING id")).scalar_one()
    r = api.get("/v1/impact", params={"around": old})
    assert r.status_code == 200, r.text
    assert r.json()["annotation"]["title"] == "old"


def test_attrs_nested_a_thousand_deep_are_rejected_by_name(api) -> None:
    deep = b'{"a":' * 1000 + b"1" + b"}" * 1000
    ev = {"event_id": str(uuid.uuid4()), "ts": datetime.now(UTC).isoformat(),
          "job_id": "deep", "attempt": 0, "model": "m", "type": "heartbeat", "attrs": {}}
    body = orjson.dumps({"events": [ev]}).replace(b'"attrs":{}', b'"attrs":' + deep)
    r = api.post("/v1/events", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 202, r.text
    (rejected,) = r.json()["rejected"]
    assert rejected["error"] == "attrs: nested deeper than 32 levels of objects and arrays"


def _otlp_json(levels: int) -> bytes:
    """One span whose attribute value nests `levels` key-value lists (as text: encoders
    refuse such depths)."""
    value = b'{"stringValue":"x"}'
    value = b'{"kvlistValue":{"values":[{"key":"k","value":' * levels + value + b"}]}}" * levels
    span = {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "training_loop",
            "startTimeUnixNano": "1", "endTimeUnixNano": "2",
            "attributes": [{"key": "deep", "value": None}]}
    doc = orjson.dumps({"resourceSpans": [{"resource": {"attributes": []},
                                           "scopeSpans": [{"spans": [span]}]}]})
    return doc.replace(b'"value":null', b'"value":' + value)


def test_otlp_json_nested_200_deep_is_a_422_naming_the_limit(api) -> None:
    r = api.post("/v1/traces", content=_otlp_json(200),
                 headers={"Content-Type": "application/json"})
    assert r.status_code == 422, r.text
    assert "OTLP JSON nested deeper than 76 levels" in r.json()["detail"]


def test_otlp_values_nested_past_the_limit_are_a_422_in_protobuf_too(api) -> None:
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    doc = orjson.loads(_otlp_json(20))
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0].update(traceId="", spanId="")
    message = json_format.ParseDict(doc, ExportTraceServiceRequest())
    r = api.post("/v1/traces", content=message.SerializeToString(),
                 headers={"Content-Type": "application/x-protobuf"})
    assert r.status_code == 422, r.text
    assert "nested deeper than 16 levels" in r.json()["detail"]


# --- bodies bounded, the role checked before reading --------------------------------

def test_a_reader_is_refused_before_its_annotation_body_is_read(api, db_engine) -> None:
    reader = _token(db_engine, "reader")
    # Not JSON at all: read first, it was a 422; the role comes first now.
    r = api.post("/v1/annotations", content=b"x" * 100_000,
                 headers={**reader, "Content-Type": "application/json"})
    assert r.status_code == 403, r.text


def test_an_annotation_body_over_the_limit_is_a_413_also_when_compressed(api) -> None:
    big = orjson.dumps({"title": "t", "text": "z" * (1024 * 1024)})
    r = api.post("/v1/annotations", content=big, headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and "limit of 65536 bytes" in r.json()["detail"]
    r = api.post("/v1/annotations", content=gzip.compress(big),
                 headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})
    assert r.status_code == 413 and "decompressed body" in r.json()["detail"]


def test_the_sign_in_form_is_bounded(api) -> None:
    from fastapi.testclient import TestClient

    browser = TestClient(api.app)
    r = browser.post("/ui/login", content=b"token=" + b"a" * (1024 * 1024),
                     headers={"Content-Type": "application/x-www-form-urlencoded"},
                     follow_redirects=False)
    assert r.status_code == 413, r.text
    ok = browser.post("/ui/login", data={"token": ADMIN_TOKEN, "next": "/ui/"},
                      follow_redirects=False)
    assert ok.status_code == 303


# --- annotations limited per team, paged ---------------------------------------------

@pytest.fixture
def few_per_team(app_context):
    from fastapi.testclient import TestClient

    app_context.settings = app_context.settings.model_copy(
        update={"annotations_max_per_team": 3})
    with TestClient(create_app(app_context)) as client:
        client.headers["Authorization"] = f"Bearer {ADMIN_TOKEN}"
        yield client


def test_a_team_holds_at_most_its_limit_of_annotations(few_per_team, db_engine) -> None:
    writer = _token(db_engine, "writer", "ads", ("ads_*",))
    ids = []
    for i in range(3):
        r = few_per_team.post("/v1/annotations", json={"title": f"n{i}"}, headers=writer)
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    r = few_per_team.post("/v1/annotations", json={"title": "one more"}, headers=writer)
    assert r.status_code == 409
    assert "team 'ads' already has 3 annotations" in r.json()["detail"]
    assert "ETT_ANNOTATIONS_MAX_PER_TEAM" in r.json()["detail"]
    # Another team (and the fleet) keep their own places.
    assert few_per_team.post("/v1/annotations", json={"title": "fleet"}).status_code == 201
    other = _token(db_engine, "writer", "search", ("search*",))
    assert few_per_team.delete(f"/v1/annotations/{ids[0]}", headers=other).status_code == 404
    assert few_per_team.delete(f"/v1/annotations/{ids[0]}", headers=writer).status_code == 204
    r = few_per_team.post("/v1/annotations", json={"title": "again"}, headers=writer)
    assert r.status_code == 201


def test_annotations_are_listed_a_page_at_a_time_in_a_stable_order(api) -> None:
    base = datetime.now(UTC).replace(microsecond=0) - timedelta(days=2)
    # Two share an instant: the id orders them.
    stamps = [base + timedelta(hours=h) for h in (0, 1, 1, 2, 3, 4, 5)]
    made = [api.post("/v1/annotations", json={"title": f"n{i}", "ts": s.isoformat()}
                     ).json()["id"] for i, s in enumerate(stamps)]
    seen, cursor, pages = [], None, 0
    while True:
        params = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        doc = api.get("/v1/annotations", params=params).json()
        seen += [a["id"] for a in doc["annotations"]]
        pages += 1
        cursor = doc["next"]
        if cursor is None:
            break
    assert seen == made and pages == 3
    assert api.get("/v1/annotations", params={"limit": 501}).status_code == 422
    bad = api.get("/v1/annotations", params={"cursor": "nope"})
    assert bad.status_code == 422 and bad.json()["detail"].startswith("cursor: ")
