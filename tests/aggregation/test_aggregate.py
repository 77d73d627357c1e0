"""The aggregator and the read API on a real PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta

import pytest
from sqlalchemy import text

from ett_core import Taxonomy
from service.aggregate import Aggregator
from tests.conftest import REPO
from tests.factories import (
    BASE,
    demo_events,
    event,
    fixed,
    post_all,
    results_state,
    spec_example,
    wipe_results,
)

MIN = 60.0


def test_the_spec_worked_example_reads_back_through_the_api(api, agg) -> None:
    post_all(api, spec_example())
    report = api.post("/v1/aggregate").json()
    assert report["jobs_recomputed"] == 1
    job = api.get("/v1/jobs/job-1").json()
    assert job["state"] == "completed"
    assert job["held_seconds"] == 160 * MIN
    assert job["effective_seconds"] == 90 * MIN
    assert job["ett_ratio"] == pytest.approx(0.5625)
    assert job["components"] == {
        "scheduling": 2 * MIN, "initialization": 16 * MIN, "compilation": 15 * MIN,
        "effective_training": 90 * MIN, "wasted_training": 30 * MIN, "shutdown": 5 * MIN,
        "unattributed": 2 * MIN,
    }
    assert job["phases"]["lost_progress"] == 29 * MIN
    assert sum(job["owners"].values()) == job["held_seconds"]
    l1 = job["level1"]
    assert (l1["tts_seconds"], l1["nof"], l1["ttr_seconds"]) == (20 * MIN, 1, [44 * MIN])
    assert (l1["in_loop_overhead_seconds"], l1["final_shutdown_seconds"]) == (MIN, 5 * MIN)
    assert [a["end_cause"] for a in job["attempts"]] == ["infra", "completed"]


def test_unknown_jobs_are_404_with_a_message(api, agg) -> None:
    r = api.get("/v1/jobs/nope")
    assert r.status_code == 404 and "unknown" in r.json()["detail"]
    api.post("/v1/events", json={"events": [event("heartbeat", 1, job_id="fresh")]})
    r = api.get("/v1/jobs/fresh")
    assert r.status_code == 404 and "no result yet" in r.json()["detail"]


def test_a_late_checkpoint_revises_lost_progress_and_windows(api, agg) -> None:
    events = spec_example()
    checkpoint = next(e for e in events if e["type"] == "checkpoint")
    post_all(api, [e for e in events if e is not checkpoint])
    api.post("/v1/aggregate")
    before = api.get("/v1/jobs/job-1").json()
    assert before["phases"]["lost_progress"] == 59 * MIN  # no durable checkpoint: all training
    post_all(api, [checkpoint])
    api.post("/v1/aggregate")
    after = api.get("/v1/jobs/job-1").json()
    assert after["phases"]["lost_progress"] == 29 * MIN
    window = api.get("/v1/ett", params={"start": "2026-11-01T00:00:00Z",
                                        "end": "2026-11-02T00:00:00Z"}).json()
    assert window["groups"][0]["effective_gpu_seconds"] == 90 * MIN * 8


def test_out_of_order_delivery_gives_the_same_results(api, agg, db_engine) -> None:
    events = spec_example()
    post_all(api, events[::-1][:10])
    api.post("/v1/aggregate")
    post_all(api, events[::-1][10:])
    api.post("/v1/aggregate")
    shuffled = results_state(db_engine)
    wipe_results(db_engine)
    agg.run_pass(recompute_all=True)
    assert results_state(db_engine) == shuffled


def test_incremental_passes_equal_a_full_recompute(api, agg, db_engine) -> None:
    events = sorted(demo_events(), key=lambda e: e["ts"])
    for i in range(0, len(events), 700):  # a pass after every slice, like live traffic
        post_all(api, events[i:i + 700])
        agg.run_pass()
    incremental = results_state(db_engine)
    assert len(incremental["jobs"]) > 6
    wipe_results(db_engine)
    agg.run_pass(recompute_all=True)
    assert results_state(db_engine) == incremental


def test_a_second_pass_with_nothing_new_changes_nothing(api, agg, db_engine) -> None:
    post_all(api, demo_events(models=3, hours=10))
    agg.run_pass()
    once = results_state(db_engine)
    report = agg.run_pass()
    assert report.jobs_recomputed == 0
    assert results_state(db_engine) == once


def test_fleet_window_equals_gpu_weighted_sums_of_job_results(api, agg) -> None:
    post_all(api, demo_events())
    agg.run_pass()
    jobs = [api.get(f"/v1/jobs/{j}").json() for j in _job_ids(api)]
    window = api.get("/v1/ett", params={"start": "2026-10-01T00:00:00Z",
                                        "end": "2026-11-19T00:00:00Z"}).json()["groups"][0]
    held = sum(a["held_seconds"] * a["gpus"] for j in jobs for a in j["attempts"])
    assert window["held_gpu_seconds"] == pytest.approx(held, rel=1e-12)
    for component, gpu_s in window["components"].items():
        expected = sum(j["components"][component] * j["attempts"][0]["gpus"] for j in jobs)
        assert gpu_s == pytest.approx(expected, rel=1e-12, abs=1e-6), component
    by_model = api.get("/v1/ett", params={"start": "2026-10-01T00:00:00Z",
                                          "end": "2026-11-19T00:00:00Z",
                                          "group_by": "model"}).json()["groups"]
    assert sum(g["held_gpu_seconds"] for g in by_model) == pytest.approx(held, rel=1e-12)


def _job_ids(api) -> list[str]:
    from sqlalchemy import text as sql

    with api.app.state.ctx.engine.connect() as conn:
        return [r[0] for r in conn.execute(sql("SELECT job_id FROM jobs ORDER BY job_id"))]


@pytest.mark.parametrize(
    ("start_min", "end_min", "expected"),
    [
        # [30, 60): training 30-50 effective, save 50-51, training 51-60 lost progress.
        (30, 60, {"held": 30, "effective_training": 20, "wasted_training": 10}),
        # [75, 90): 75-80 lost training, 80-82 unattributed, 82-85 not held, 85-90 init.
        (75, 90, {"held": 12, "wasted_training": 5, "unattributed": 2, "initialization": 5}),
        # [0.5, 0.75): inside one minute of scheduling, inside one hour.
        (0.5, 0.75, {"held": 0.25, "scheduling": 0.25}),
        # [10, 130): spans whole hours (01:00-02:00) and two partial edges.
        (10, 130, {"held": 117, "compilation": 15, "effective_training": 62,
                   "wasted_training": 30, "unattributed": 2, "initialization": 8}),
        # [-90, 1515): a whole UTC day (Nov 1) with ragged hours and minutes on both sides.
        (-90, 1515, {"held": 160, "scheduling": 2, "initialization": 16, "compilation": 15,
                     "effective_training": 90, "wasted_training": 30, "shutdown": 5,
                     "unattributed": 2}),
        # [30, 2910): from inside Nov 1 to inside Nov 3: partial day, whole day, partial day.
        (30, 2910, {"held": 130, "compilation": 5, "effective_training": 80,
                    "wasted_training": 30, "initialization": 8, "shutdown": 5,
                    "unattributed": 2}),
    ],
)
def test_windows_count_only_the_part_inside_them(api, agg, start_min, end_min,
                                                 expected) -> None:
    post_all(api, spec_example())
    agg.run_pass()
    start = BASE + timedelta(minutes=start_min)
    end = BASE + timedelta(minutes=end_min)
    g = api.get("/v1/ett", params={"start": start.isoformat(), "end": end.isoformat()}
                ).json()["groups"][0]
    gpu_min = 8 * MIN
    assert g["held_gpu_seconds"] == pytest.approx(expected.pop("held") * gpu_min)
    for component, minutes in expected.items():
        assert g["components"][component] == pytest.approx(minutes * gpu_min), component
    assert sum(g["components"].values()) == pytest.approx(g["held_gpu_seconds"])


def test_an_empty_window_is_zeros_with_a_null_ratio(api, agg) -> None:
    body = api.get("/v1/ett", params={"start": "2020-01-01T00:00:00Z",
                                      "end": "2020-01-02T00:00:00Z"}).json()
    assert body["groups"] == [{
        "key": None, "held_gpu_seconds": 0.0, "effective_gpu_seconds": 0.0,
        "at_risk_gpu_seconds": 0.0, "ett_ratio": None,
        "components": dict.fromkeys(body["groups"][0]["components"], 0.0),
        "unreported_gpu_seconds": 0.0, "unreported_ratio": None, "queue_seconds": 0.0,
    }]
    assert body["start"] == "2020-01-01T00:00:00+00:00"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"start": "2026-11-02T00:00:00Z", "end": "2026-11-01T00:00:00Z"}, "end: must be after"),
        ({"start": "yesterday"}, "start: 'yesterday' is not an RFC 3339"),
        ({"start": "2020-01-01T00:00:00Z", "end": "2026-01-01T00:00:00Z"}, "at most 400 days"),
        ({"group_by": "hour"}, "group_by: must be one of"),
        ({"model": "a\x00b"}, "model: must not contain the character U+0000"),
        ({"team": "\x00"}, "team: must not contain the character U+0000"),
    ],
)
def test_bad_windows_are_422_with_a_message(api, params, message) -> None:
    r = api.get("/v1/ett", params=params)
    assert r.status_code == 422
    assert message in r.json()["detail"]


def test_team_bill_and_model_overview(api, agg) -> None:
    post_all(api, spec_example())
    agg.run_pass()
    bill = api.get("/v1/teams/reliability/bill", params={
        "start": "2026-11-01T00:00:00Z", "end": "2026-11-02T00:00:00Z"}).json()
    assert bill["lost_gpu_hours"] == pytest.approx(29 / 60 * 8)
    assert bill["by_phase"] == {"lost_progress": pytest.approx(29 / 60 * 8)}
    assert bill["by_model"] == {"model-a": pytest.approx(29 / 60 * 8)}
    own = api.get("/v1/teams/ads/bill", params={
        "start": "2026-11-01T00:00:00Z", "end": "2026-11-02T00:00:00Z"}).json()
    assert own["lost_gpu_hours"] == 0  # the model team's effective training is not lost
    models = api.get("/v1/models").json()["models"]
    assert [(m["model"], m["team"]) for m in models] == [("model-a", "ads")]


def test_reads_need_a_token(api) -> None:
    api.headers.pop("Authorization")
    for path in ("/v1/jobs/x", "/v1/ett", "/v1/models", "/v1/teams/a/bill"):
        assert api.get(path).status_code == 401, path
    assert api.post("/v1/aggregate").status_code == 401


def test_two_aggregators_at_once_give_the_same_results_as_one(api, agg, db_engine) -> None:
    post_all(api, demo_events(models=8, hours=20))
    one = Aggregator(db_engine, Taxonomy.default(), batch_jobs=3, clock=fixed())
    two = Aggregator(db_engine, Taxonomy.default(), batch_jobs=3, clock=fixed())
    threads = [threading.Thread(target=a.run_pass) for a in (one, two)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    one.run_pass()  # whatever one skipped because the other held it
    together = results_state(db_engine)
    with db_engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM dirty_jobs")).scalar() == 0
    wipe_results(db_engine)
    Aggregator(db_engine, Taxonomy.default(), clock=fixed()).run_pass(recompute_all=True)
    assert results_state(db_engine) == together


def test_a_job_the_engine_cannot_compute_is_quarantined_until_a_new_process_retries_it(
        api, agg, db_engine, monkeypatch) -> None:
    post_all(api, spec_example())
    import service.aggregate as module

    def boom(*_a, **_k):
        raise RuntimeError("engine bug")

    monkeypatch.setattr(module, "compute_job", boom)
    report = agg.run_pass()
    assert (report.jobs_failed, report.jobs_quarantined) == (1, 1)
    with db_engine.connect() as conn:
        error = conn.execute(text("SELECT error FROM aggregation_quarantine")).scalar_one()
    assert error == "engine: RuntimeError: engine bug"
    monkeypatch.undo()
    assert agg.run_pass().jobs_recomputed == 0  # unchanged: held out, not retried every pass
    # A new process (the fix deployed) retries it once.
    fresh = Aggregator(db_engine, Taxonomy.default(), clock=fixed())
    report = fresh.run_pass()
    assert (report.jobs_recomputed, report.jobs_quarantined) == (1, 0)


@pytest.mark.slow
def test_a_pass_killed_mid_way_then_rerun_equals_an_uninterrupted_one(api, agg, db_engine,
                                                                      database_url) -> None:
    post_all(api, demo_events(models=12, hours=40))
    env = {**os.environ, "ETT_DATABASE_URL": database_url, "ETT_LOG_LEVEL": "warning",
           "ETT_AGGREGATE_BATCH_JOBS": "2"}
    kills = 0
    for delay in (0.4, 0.6, 0.8, 1.0):
        proc = subprocess.Popen([sys.executable, "-m", "service.cli", "aggregate"], cwd=REPO,
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
    assert kills >= 1, "the pass finished before it could be killed; use more data"
    agg.run_pass()
    interrupted = results_state(db_engine)
    wipe_results(db_engine)
    agg.run_pass(recompute_all=True)
    assert results_state(db_engine) == interrupted


@pytest.mark.parametrize("path", ["/v1/jobs/a%00b", "/v1/teams/a%00b/bill"])
def test_a_nul_in_a_path_is_422_not_a_server_error(api, path) -> None:
    r = api.get(path)
    assert r.status_code == 422, r.text
    assert "must not contain the character U+0000" in r.json()["detail"]


def test_a_pass_leaves_the_collector_and_the_connection_settings_as_it_found_them(
        api, agg) -> None:
    # Chunks hold off the cyclic GC and relax commit durability for their own transaction
    # only (service/aggregate.py); neither may leak into the process or the pool.
    import gc

    post_all(api, demo_events(models=2, hours=4))
    assert gc.isenabled()
    assert agg.run_pass().jobs_recomputed > 0
    assert gc.isenabled()
    gc.disable()
    try:
        agg.run_pass(recompute_all=True)
        assert not gc.isenabled()  # whoever paused it resumes it
    finally:
        gc.enable()
    with agg.engine.connect() as conn:  # the pooled connection the passes used
        assert conn.execute(text("SHOW synchronous_commit")).scalar() == "on"
        assert conn.execute(text("SHOW max_parallel_workers_per_gather")).scalar() != "0"
