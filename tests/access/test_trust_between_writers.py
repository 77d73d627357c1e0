"""Trust between writers: sums that cannot overflow, no future time counted now, and the
ingest window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import text

from tests.access.access_helpers import post, token
from tests.factories import BASE, event, fixed, post_all

MAX_GPUS = 2 ** 20


def test_a_model_day_of_120_jobs_at_the_gpu_bound_is_stored_and_read(api, app_context,
                                                                      db_engine) -> None:
    """120 jobs at 2^20 GPUs in one model for one UTC day is 1.09e19 GPU-microseconds, past
    a bigint: `fleet_daily` still stores it (no `bigint out of range`)."""
    day = BASE.replace(hour=0, minute=0)
    events = []
    for i in range(120):
        job = dict(job_id=f"big-{i}", model="huge", base=day)
        events += [event("allocated", 0, gpus=MAX_GPUS, team="t", **job),
                   event("released", 24 * 60, **job)]
    post_all(api, events)
    agg = app_context.aggregator
    agg.clock = fixed(day + timedelta(days=2))
    report = agg.run_pass()
    assert report.jobs_failed == 0 and report.jobs_recomputed == 120
    expected = 120 * MAX_GPUS * 86_400 * 1_000_000  # 1.087e19 > 2^63 - 1
    assert expected > 2 ** 63
    with db_engine.connect() as conn:
        stored = conn.execute(text(
            "SELECT sum(settled_gpu_us + unsettled_gpu_us) FROM fleet_daily"
            " WHERE model = 'huge'")).scalar_one()
        hourly = conn.execute(text(
            "SELECT sum(settled_gpu_us + unsettled_gpu_us) FROM fleet_hourly"
            " WHERE model = 'huge'")).scalar_one()
    assert stored == hourly == expected
    r = api.get("/v1/ett", params={"model": "huge", "start": day.isoformat(),
                                   "end": (day + timedelta(days=1)).isoformat()})
    assert r.status_code == 200, r.text


def test_a_release_stamped_ahead_of_the_server_is_not_counted_before_it_happens(
        api, app_context) -> None:
    """A `released` 290 s in the future (within the 300 s skew allowance) is not counted as
    held time at once (890 s held at a moment only 600 s have passed)."""
    now = datetime.now(UTC).replace(microsecond=0)
    start = (now - timedelta(seconds=600)).isoformat()
    job = dict(job_id="ahead", model="m", base=now)
    post_all(api, [
        {**event("allocated", 0, gpus=1, **job), "ts": start},
        {**event("phase_start", 0, phase="training", **job), "ts": start},
        {**event("released", 0, **job), "ts": (now + timedelta(seconds=290)).isoformat()},
    ])
    agg = app_context.aggregator
    agg.clock = fixed(now)
    agg.run_pass()
    early = api.get("/v1/jobs/ahead").json()
    assert early["held_seconds"] == 600 and early["attempts"][0]["released_at"] is None
    agg.clock = fixed(now + timedelta(seconds=300))
    agg.run_pass()  # the job was queued again: its release is due now
    late = api.get("/v1/jobs/ahead").json()
    assert late["held_seconds"] == 890 and late["attempts"][0]["released_at"] is not None


def test_a_writer_may_not_send_events_older_than_the_ingest_window(make_client,
                                                                    db_engine) -> None:
    """Allocated at now - 399 d and released now would make 9,600 segment and rollup rows
    per job from two events, so a writer's events older than ETT_INGEST_MAX_AGE (7 days)
    are rejected per event, naming the window and the backfill path; an admin backfills."""
    client = make_client()
    writer = token(db_engine, "writer", "ads", ("ads_*",))
    now = datetime.now(UTC)
    old = dict(job_id="old", model="ads_x", base=now - timedelta(days=8))
    recent = dict(job_id="recent", model="ads_x", base=now - timedelta(days=6))
    events = [event("allocated", 0, gpus=8, **old), event("allocated", 0, gpus=8, **recent)]
    body = post(client, writer, events).json()
    assert body["accepted"] == 1 and [r["index"] for r in body["rejected"]] == [0]
    error = body["rejected"][0]["error"]
    assert "ingest window of 7 days" in error and "ETT_INGEST_MAX_AGE" in error
    assert "admin token" in error
    # The backfill path: the same event with an admin token (up to the retention horizon).
    admin = client.post("/v1/events", json={"events": events[:1]},
                        headers={"Authorization": "Bearer test-admin-token"}).json()
    assert (admin["accepted"], admin["rejected"]) == (1, [])


def test_the_ingest_window_is_a_setting(make_client, db_engine) -> None:
    client = make_client(ingest_max_age=timedelta(days=1))
    writer = token(db_engine, "writer", "ads", ("ads_*",))
    two_days = event("heartbeat", 0, job_id="j", model="ads_x",
                     base=datetime.now(UTC) - timedelta(days=2))
    body = post(client, writer, [two_days]).json()
    assert "ingest window of 1 days" in body["rejected"][0]["error"]


def test_a_reader_names_a_moved_job_by_its_team_namespaced_name(api, app_context) -> None:
    """The job a team's events went to, because another team wrote the id first,
    reads back under the name the 202 answer gave."""
    first = [event("allocated", 0, job_id="slurm-7", model="feed_x", gpus=1, team="feed"),
             event("released", 10, job_id="slurm-7", model="feed_x")]
    real = [event("allocated", 0, job_id="slurm-7", model="ads_x", gpus=8, team="ads"),
            event("released", 60, job_id="slurm-7", model="ads_x", team="ads")]
    post_all(api, first)
    body = api.post("/v1/events", json={"events": real}).json()
    assert {m["job_id"] for m in body["moved"]} == {"slurm-7@ads"}
    app_context.aggregator.clock = fixed(BASE + timedelta(days=1))
    app_context.aggregator.run_pass()
    for path in ("/v1/jobs/slurm-7@ads", "/v1/jobs/slurm-7%40ads"):
        job = api.get(path).json()
        assert (job["model"], job["team"], job["held_seconds"]) == ("ads_x", "ads", 3600)
    assert api.get("/v1/jobs/slurm-7").json()["model"] == "feed_x"
