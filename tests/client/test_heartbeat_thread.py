"""The heartbeat thread: liveness and the latest step, sent off the training thread."""

from __future__ import annotations

import threading
import time

from ett_client.integrations.timeline import TrainerTimeline

from tests.client.fake_service import FakeService, wait_for


def _beats(fake: FakeService) -> list[dict]:
    return sorted((e for e in fake.events() if e["type"] == "heartbeat"), key=lambda e: e["ts"])


def test_the_thread_sends_the_latest_step_from_allocated_to_the_release(fake, make_recorder):
    rec = make_recorder(fake.url, heartbeat_s=0.05)
    rec.step(3)  # before allocated(): stored, nothing sent
    time.sleep(0.15)
    assert rec.flush(5) and _beats(fake) == []
    rec.allocated()
    rec.step(7)
    assert wait_for(lambda: rec.flush(1) and len(_beats(fake)) >= 2)
    # The loop hangs: the step stays at 7 and the heartbeats keep coming.
    assert wait_for(lambda: rec.flush(1) and len(_beats(fake)) >= 5)
    rec.step(8)
    assert wait_for(lambda: rec.flush(1) and _beats(fake)[-1]["attrs"] == {"step": 8})
    rec.released()
    assert rec.flush(5)
    count = len(_beats(fake))
    time.sleep(0.2)
    assert rec.flush(5) and len(_beats(fake)) == count  # the release stopped the thread
    steps = [b["attrs"]["step"] for b in _beats(fake)]
    assert steps == sorted(steps) and set(steps) <= {7, 8} and steps.count(7) >= 4
    released = next(e for e in fake.events() if e["type"] == "released")
    assert all(b["ts"] <= released["ts"] for b in _beats(fake))


def test_without_a_step_the_heartbeats_carry_none_and_a_bad_step_is_rejected(fake,
                                                                             make_recorder):
    rec = make_recorder(fake.url)
    rec.allocated()
    rec.start_heartbeat(0.03)
    assert wait_for(lambda: rec.flush(1) and len(_beats(fake)) >= 1)
    assert "attrs" not in _beats(fake)[0] or not _beats(fake)[0]["attrs"]
    rec.step("seven")  # type: ignore[arg-type]
    assert wait_for(lambda: _rejections(rec) >= 1)
    rec.close()


def _rejections(rec) -> int:
    return rec._pipeline.caller.rejected if rec._pipeline is not None else 0


def test_the_trainer_timeline_stores_the_step_and_the_thread_sends_it(fake, make_recorder):
    rec = make_recorder(fake.url)
    timeline = TrainerTimeline(rec, heartbeat_s=0.03)
    timeline.begin(gpus=2)
    sent_before = rec.stats()["enqueued"]
    for step in range(1, 6):
        timeline.step(step)
    # The step path emitted nothing beyond the first step's: the phase change, and the
    # step training starts from.
    assert rec.stats()["enqueued"] == sent_before + 3
    assert wait_for(lambda: rec.flush(1) and any(b["attrs"].get("step") == 5 for b in _beats(fake)))
    assert any(t.name == "ett-client-heartbeat" for t in threading.enumerate())
    timeline.finish()
    assert not any(t.name == "ett-client-heartbeat" and t.is_alive()
                   for t in threading.enumerate())
