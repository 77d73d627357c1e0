"""Stalls in /metrics: ett_stalled_jobs and ett_stalled_gpu_seconds_total."""

from __future__ import annotations

from datetime import timedelta

from tests.factories import NOW, event, post_all
from tests.metrics.test_metrics import samples

START = NOW - timedelta(hours=1)


def stalled_job(job_id: str, model: str, *, hang: bool) -> list[dict]:
    """Training since START on 8 GPUs, a step a minute for 30 minutes; then, if `hang`,
    heartbeats every minute with the same step up to a minute before now."""
    e = lambda t, m, **kw: event(t, m, job_id=job_id, model=model, base=START, **kw)  # noqa: E731
    events = [e("allocated", 0, gpus=8, team="ads"), e("phase_start", 0, phase="training")]
    events += [e("heartbeat", m, attrs={"step": m}) for m in range(1, 31)]
    events += [e("heartbeat", m, attrs={"step": 30 if hang else m}) for m in range(31, 60)]
    return events


def test_a_stall_going_on_now_is_counted_and_its_gpu_time_exported(api, exporter) -> None:
    post_all(api, stalled_job("hung", "model-s", hang=True)
             + stalled_job("fine", "model-f", hang=False))
    api.post("/v1/aggregate")
    m = samples(api.get("/metrics").text)
    # Threshold max(300 s, 5 x 60 s); the last advance at 30, stalled from 31 to now (60),
    # settled up to the last news at 59: 28 minutes on 8 GPUs.
    assert m[("ett_stalled_jobs", (("model", "model-s"), ("team", "ads")))] == 1
    assert m[("ett_stalled_jobs", (("model", "model-f"), ("team", "ads")))] == 0
    assert m[("ett_stalled_gpu_seconds_total", (("model", "model-s"), ("team", "ads")))] == (
        28 * 60 * 8)
    # Present at 0 for a model that never stalled once it has held time (none settled yet
    # here: its training is at risk, so no series).
    assert m.get(("ett_stalled_gpu_seconds_total", (("model", "model-f"), ("team", "ads"))),
                 0) == 0
    job = api.get("/v1/jobs/hung").json()
    assert job["phases"]["stalled"] == 29 * 60
    [progress] = job["progress"]
    assert progress["stalled_since"] == (START + timedelta(minutes=31)).isoformat().replace(
        "+00:00", "Z")
    assert progress["threshold_seconds"] == 300
    assert api.get("/v1/jobs/fine").json()["progress"][0]["stalled_since"] is None
