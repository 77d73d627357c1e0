"""Who may do what over HTTP: roles, model patterns, team claims, revocation, open probes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from service.access import tokens
from service.api.app import create_app
from service.api.context import build_context
from service.settings import Settings
from tests.access.access_helpers import auth, event, post, stored_models, token, until
from tests.conftest import ADMIN_TOKEN
from tests.factories import FakeClock


def test_a_writer_may_post_events_for_the_models_it_matches(client, db_engine) -> None:
    writer = token(db_engine, "writer", "ads", ("ads_*",))
    r = post(client, writer, [event("heartbeat", 1, model="ads_ctr", job_id="j-ctr"),
                              event("heartbeat", 2, model="ads_new", job_id="j-new")])
    assert r.status_code == 202 and r.json()["accepted"] == 2, r.text


def test_a_batch_only_for_forbidden_models_is_403_naming_the_model(client, db_engine) -> None:
    writer = token(db_engine, "writer", "ads", ("ads_*",))
    r = post(client, writer, [event("heartbeat", 1, model="search_rank")] * 2)
    assert r.status_code == 403
    assert "may not write model 'search_rank'" in r.json()["detail"]
    assert stored_models(db_engine) == []


def test_a_mixed_batch_stores_the_permitted_events_and_rejects_the_others(client,
                                                                         db_engine) -> None:
    writer = token(db_engine, "writer", "ads", ("ads_*",))
    r = post(client, writer, [event("heartbeat", 1, model="search_rank"),
                              event("heartbeat", 2, model="ads_ctr")])
    assert r.status_code == 202
    assert r.json() == {"accepted": 1, "duplicates": 0, "rejected": [
        {"index": 0, "error": "model: this token may not write model 'search_rank'"}]}
    assert stored_models(db_engine) == ["ads_ctr"]


def test_a_writer_may_not_claim_another_team_for_a_model(client, db_engine) -> None:
    writer = token(db_engine, "writer", "ads", ("ads_*",))
    r = post(client, writer, [
        event("allocated", 0, gpus=8, model="ads_new", team="ads"),          # its own team
        event("allocated", 0, gpus=8, model="ads_new", team="search"),       # another team
        event("allocated", 0, gpus=8, model="ads_shared", team="ads-platform",  # configured
              job_id="job-2"),
        event("allocated", 0, gpus=8, model="ads_shared", team="ads",        # not the owner
              job_id="job-2"),
    ]).json()
    assert r["accepted"] == 2
    assert [x["index"] for x in r["rejected"]] == [1, 3]
    assert r["rejected"][0]["error"] == (
        "team: this token may not claim team 'search' for model 'ads_new'"
        " (this token's team is 'ads')")
    assert "(the configured owner is 'ads-platform')" in r["rejected"][1]["error"]
    only_claims = post(client, writer, [event("heartbeat", 1, model="ads_ctr", team="search")])
    assert only_claims.status_code == 403
    assert "may not claim team 'search'" in only_claims.json()["detail"]


def test_an_admin_may_write_any_model_and_team(client, db_engine) -> None:
    r = client.post("/v1/events", json={"events": [event("heartbeat", 1, model="x", team="y")]},
                    headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert r.status_code == 202 and r.json()["accepted"] == 1


def test_a_reader_may_read_but_not_post_or_aggregate(make_client, db_engine) -> None:
    settings = Settings(database_url="postgresql://unused", admin_token=ADMIN_TOKEN)
    ctx = build_context(settings, db_engine)
    with TestClient(create_app(ctx)) as client:
        reader = auth(token(db_engine, "reader"))
        writer = auth(token(db_engine, "writer", "ads", ("ads_*",)))
        r = client.post("/v1/events", json={"events": [event("heartbeat", 1)]}, headers=reader)
        assert r.status_code == 403 and "reader token may not post" in r.json()["detail"]
        for headers in (reader, writer):  # docs/model.md section 7: any valid token may read
            for path in ("/v1/ett", "/v1/models", "/v1/teams/ads/bill"):
                assert client.get(path, headers=headers).status_code == 200, path
            assert client.get("/v1/jobs/none", headers=headers).status_code == 404
            r = client.post("/v1/aggregate", headers=headers)
            assert r.status_code == 403 and "needs an admin token" in r.json()["detail"]
        admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        assert client.post("/v1/aggregate", headers=admin).status_code == 200
    assert stored_models(db_engine) == []


def test_a_revoked_token_is_refused_within_the_cache_ttl(make_client, db_engine) -> None:
    clock = FakeClock()
    client = make_client(token_clock=clock, token_cache_ttl_s=0.5)
    writer = token(db_engine, "writer", "ads", ("ads_*",))
    assert post(client, writer, [event("heartbeat", 1, model="ads_a")]).status_code == 202
    with db_engine.begin() as conn:
        tokens.revoke_token(conn, writer["id"])
    deadline = clock.now + 5
    while post(client, writer, [event("heartbeat", 1, model="ads_a")]).status_code == 202:
        assert clock.now < deadline, "revocation did not take effect"
        clock.now += 0.05
    r = post(client, writer, [event("heartbeat", 1, model="ads_a")])
    assert r.status_code == 401 and "invalid or revoked token" in r.json()["detail"]
    assert client.get("/v1/models", headers=auth(writer)).status_code == 401


def test_last_use_reaches_the_database_after_the_flush_interval(make_client, db_engine) -> None:
    clock = FakeClock()
    client = make_client(token_clock=clock, token_last_used_flush_s=0.2)
    reader = token(db_engine, "reader")
    client.get("/v1/models", headers=auth(reader))
    clock.now += 0.3
    client.get("/v1/models", headers=auth(reader))  # starts the write, in the background

    def written() -> bool:
        with db_engine.connect() as conn:
            return conn.execute(text("SELECT last_used_at FROM api_tokens")).scalar() is not None

    until(written, "the last-use write")


def test_probes_and_metrics_are_open_by_default_and_metrics_can_require_a_token(
        make_client, db_engine) -> None:
    open_ = make_client()
    assert open_.get("/metrics").status_code == 200
    closed = make_client(metrics_auth=True)
    assert closed.get("/healthz").status_code == 200
    assert closed.get("/readyz").status_code == 200
    assert closed.get("/metrics").status_code == 401
    reader = auth(token(db_engine, "reader"))
    assert closed.get("/metrics", headers=reader).status_code == 200


def test_events_older_than_the_retention_horizon_are_rejected_with_the_limit(
        make_client) -> None:
    client = make_client(max_event_age_days=2)
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    now = datetime.now(UTC)
    old = event("heartbeat", 0, base=now - timedelta(days=3))
    recent = event("heartbeat", 0, base=now - timedelta(days=1))
    r = client.post("/v1/events", json={"events": [old, recent]}, headers=admin).json()
    assert r["accepted"] == 1
    assert r["rejected"][0]["index"] == 0
    assert "older than the retention horizon of 2 days" in r["rejected"][0]["error"]


@pytest.mark.parametrize("ts", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
def test_timestamps_out_of_range_in_utc_are_clear_errors_not_500(make_client, ts) -> None:
    client = make_client()
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    ev = event("heartbeat", 0)
    ev["ts"] = ts
    r = client.post("/v1/events", json={"events": [ev]}, headers=admin)
    assert r.status_code == 202
    assert "is out of range in UTC" in r.json()["rejected"][0]["error"]
    r = client.get("/v1/ett", params={"start": ts}, headers=admin)
    assert r.status_code == 422 and "start:" in r.json()["detail"]
