"""Isolation: a job whose computation or storage fails is quarantined,
and every other job of the pass still gets its results."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from service.metrics.collector import register_aggregator_metrics
from tests.factories import NOW, event, spec_example


@pytest.fixture
def agg(app_context, db_engine):
    app_context.aggregator.clock = lambda: NOW
    collector = register_aggregator_metrics(app_context.registry, app_context.aggregator,
                                            db_engine)
    yield app_context.aggregator
    collector.close()


def store_legacy_event(engine, job_id: str, type_: str, ts: str, gpus: int | None) -> None:
    """An event stored before ingest bounded `gpus` (what the defect's writer left)."""
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO events (event_id, ts, job_id, attempt, model, type, gpus)"
            " VALUES (:id, :ts, :job, 0, 'search', :type, :gpus)"),
            {"id": str(uuid.uuid4()), "ts": ts, "job": job_id, "type": type_, "gpus": gpus})
        conn.execute(text("INSERT INTO dirty_jobs (job_id) VALUES (:job)"), {"job": job_id})


def test_an_overflowing_job_is_quarantined_and_every_other_job_gets_results(
        api, agg, db_engine) -> None:
    # gpus = 2**31 - 1 held for three hours: 2147483647 GPUs x 3 h x 3.6e9 us/h = 2.3e19
    # GPU-microseconds in one day row, past a bigint (9.2e18). Before: every pass failed.
    store_legacy_event(db_engine, "huge", "allocated", "2026-11-01T00:00:00Z", 2**31 - 1)
    store_legacy_event(db_engine, "huge", "released", "2026-11-01T03:00:00Z", None)
    r = api.post("/v1/events", json={"events": spec_example()})
    assert r.status_code == 202 and r.json()["accepted"] == len(spec_example())
    report = api.post("/v1/aggregate")
    assert report.status_code == 200, report.text
    assert report.json()["jobs_failed"] == 1 and report.json()["jobs_quarantined"] == 1
    # The other job's results are complete (docs/model.md section 6: ETT 56.25%).
    assert api.get("/v1/jobs/job-1").json()["ett_ratio"] == pytest.approx(0.5625)
    listed = api.get("/v1/admin/quarantine").json()
    assert listed["count"] == 1
    assert listed["jobs"][0]["job_id"] == "huge" and listed["jobs"][0]["failures"] == 1
    assert "64-bit" in listed["jobs"][0]["error"] or "range" in listed["jobs"][0]["error"]
    assert "\nett_aggregation_quarantined_jobs 1.0\n" in api.get("/metrics").text

    # Unchanged, it is left out of the next pass (no new failure, no retry storm).
    again = api.post("/v1/aggregate").json()
    assert again["jobs_failed"] == 0 and again["jobs_quarantined"] == 1

    # New events: retried (and fails again, counted).
    r = api.post("/v1/events", json={"events": [
        event("heartbeat", 60, job_id="huge", model="search")]})
    assert r.status_code == 202 and r.json()["accepted"] == 1, r.text
    assert api.post("/v1/aggregate").json()["jobs_failed"] == 1
    assert api.get("/v1/admin/quarantine").json()["jobs"][0]["failures"] == 2

    # Repaired (an operator corrected the stored value) and changed again: stored, released.
    with db_engine.begin() as conn:
        conn.execute(text("UPDATE events SET gpus = 8 WHERE job_id = 'huge' AND gpus > 8"))
    api.post("/v1/events", json={"events": [
        event("heartbeat", 61, job_id="huge", model="search")]})
    final = api.post("/v1/aggregate").json()
    assert final["jobs_failed"] == 0 and final["jobs_quarantined"] == 0
    # 8 GPUs x 3 h = 86400 GPU-seconds held.
    assert api.get("/v1/jobs/huge").json()["held_seconds"] == 3 * 3600
    assert api.get("/v1/admin/quarantine").json() == {"count": 0, "jobs": []}
    assert "\nett_aggregation_quarantined_jobs 0.0\n" in api.get("/metrics").text


def test_the_quarantine_listing_needs_the_admin_token(api, agg) -> None:
    r = api.get("/v1/admin/quarantine", headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401


_writer = st.fixed_dictionaries({
    "job": st.sampled_from(["a", "b/c", "d:e", "f.g"]),
    "model": st.sampled_from(["m1", "m2"]),
    "gpus": st.integers(1, 2**20),
    "start": st.integers(0, 60 * 24 * 9),
    "minutes": st.integers(0, 60 * 24 * 9),  # all before NOW
    "failure": st.booleans(),
})


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_writer, min_size=1, max_size=8))
def test_random_valid_batches_from_many_writers_never_make_a_pass_fail(
        api, agg, db_engine, writers) -> None:
    """Property: whatever valid events many writers send (up to the bounds), a pass
    answers 200 and quarantines nothing."""
    with db_engine.begin() as conn:
        conn.execute(text("TRUNCATE events, dirty_jobs, jobs, attempts, segments,"
                          " rollup_hourly, fleet_hourly, fleet_daily, fleet_weekly,"
                          " team_hourly, team_daily, model_hourly, model_daily, model_weekly,"
                          " settled_totals,"
                          " aggregation_quarantine, job_owners"))
    run = uuid.uuid4().hex[:8]  # the app's owner cache outlives the truncation
    for i, w in enumerate(writers):
        job = f"{w['job']}-{i}-{run}"
        events = [event("allocated", w["start"], job_id=job, model=w["model"],
                        gpus=w["gpus"]),
                  event("phase_start", w["start"], job_id=job, model=w["model"],
                        phase="training")]
        if w["failure"]:
            events.append(event("failure", w["start"] + w["minutes"], job_id=job,
                                model=w["model"], attrs={"cause": "infra"}))
        events.append(event("released", w["start"] + w["minutes"], job_id=job,
                            model=w["model"]))
        r = api.post("/v1/events", json={"events": events})
        assert r.status_code == 202 and not r.json()["rejected"], r.text
    report = api.post("/v1/aggregate")
    assert report.status_code == 200, report.text
    assert report.json()["jobs_failed"] == 0 and report.json()["jobs_quarantined"] == 0
