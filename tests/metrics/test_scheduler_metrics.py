"""/metrics for the scheduler's word: queue seconds, uninstrumented GPU-seconds, and the jobs
whose trainer went silent while the scheduler holds them (EttTelemetrySilent's input)."""

from __future__ import annotations

from tests.factories import event, post_all, ts
from tests.metrics.test_metrics import samples


def sched(type_: str, minutes: float, **fields):
    return event(type_, minutes, attrs={"source": "scheduler", **fields.pop("attrs", {})},
                 **fields)


def test_queue_uninstrumented_and_silent_series(api, exporter) -> None:
    post_all(api, [
        # Nobody instrumented this one: 30 min on 4 GPUs, after 5 min in the queue.
        sched("allocated", 0, job_id="u1", model="batch", team="eval", gpus=4,
              attrs={"queued_at": ts(-5)}),
        sched("released", 30, job_id="u1", model="batch", team="eval",
              attrs={"reason": "completed"}),
        # Held by the scheduler, its trainer silent since minute 3 (and "now" is days on).
        sched("allocated", 0, job_id="s1", model="llama", team="llm", gpus=8,
              attrs={"queued_at": ts(-1)}),
        event("allocated", 1, job_id="s1", model="llama", team="llm", gpus=8),
        event("phase_start", 2, job_id="s1", model="llama", phase="training"),
        event("heartbeat", 3, job_id="s1", model="llama"),
    ])
    assert api.post("/v1/aggregate").status_code == 200
    m = samples(api.get("/metrics").text)
    batch, llama = (("model", "batch"), ("team", "eval")), (("model", "llama"), ("team", "llm"))
    assert m[("ett_queue_seconds_total", batch)] == 300
    assert m[("ett_queue_seconds_total", llama)] == 60
    assert m[("ett_uninstrumented_gpu_seconds_total", batch)] == 30 * 60 * 4
    assert m[("ett_uninstrumented_gpu_seconds_total", llama)] == 0
    assert m[("ett_telemetry_silent_jobs", llama)] == 1
    assert m[("ett_telemetry_silent_jobs", batch)] == 0
    job = api.get("/v1/jobs/s1").json()
    assert job["state"] == "running" and job["phases"]["unreported"] > 0
    window = {"start": ts(-60), "end": ts(120), "group_by": "model"}
    groups = {g["key"]: g for g in api.get("/v1/ett", params=window).json()["groups"]}
    assert groups["batch"]["queue_seconds"] == 300
    assert groups["batch"]["unreported_gpu_seconds"] == 30 * 60 * 4
    assert groups["batch"]["unreported_ratio"] == 1.0
    assert groups["llama"]["queue_seconds"] == 60
    fleet = api.get("/v1/ett", params={"start": ts(-60), "end": ts(120)}).json()["groups"][0]
    assert fleet["queue_seconds"] == 360
