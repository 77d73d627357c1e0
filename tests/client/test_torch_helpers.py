"""PyTorch helpers, in one CPU process: compilation, async/sync DCP saves, load."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("numpy")  # torch.distributed.checkpoint needs it

from ett_client import torch_helpers as ett_torch  # noqa: E402

from tests.client.fake_service import FakeService  # noqa: E402


def phases(fake: FakeService) -> list[tuple[str, str]]:
    return [(e["type"], e.get("phase", "")) for e in sorted(fake.events(), key=lambda e: e["ts"])
            if e["type"] in ("phase_start", "phase_end")]


def test_compilation_and_recompilation_are_recorded_as_the_compilation_phase(fake, make_recorder):
    rec = make_recorder(fake.url)
    torch._dynamo.reset()
    fn = ett_torch.compile(rec, lambda x: x * 2 + 1, backend="eager", dynamic=False)
    fn(torch.ones(3))
    fn(torch.ones(3))  # cached: no compilation
    fn(torch.ones(5))  # new shape: a recompile
    fn._ett_compilation_tracker.remove()
    fn(torch.ones(7))  # not tracked any more
    assert rec.flush(5)
    got = phases(fake)
    assert got and set(got) == {("phase_start", "compilation"), ("phase_end", "compilation")}
    assert got.count(("phase_start", "compilation")) == 2
    assert got.count(("phase_start", "compilation")) == got.count(("phase_end", "compilation"))


def test_async_save_records_the_blocking_part_and_the_checkpoint_when_durable(
        fake, make_recorder, tmp_path: Path):
    rec = make_recorder(fake.url)
    state = {"w": torch.arange(10.0)}
    future = ett_torch.async_save(rec, state, step=5, checkpoint_id=str(tmp_path / "c"),
                                  no_dist=True)
    getattr(future, "upload_completion", future).result(timeout=30)
    # result() wakes this thread before the future's done-callbacks (which record the
    # checkpoint) have run: wait for the callback, not for a lucky schedule.
    deadline = time.monotonic() + 30
    while True:
        assert rec.flush(5)
        if any(e["type"] == "checkpoint" for e in fake.events()) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    events = sorted(fake.events(), key=lambda e: e["ts"])
    kinds = [(e["type"], e.get("phase")) for e in events]
    assert kinds == [("phase_start", "checkpoint_save"), ("phase_end", "checkpoint_save"),
                     ("checkpoint", None)]
    checkpoint = events[-1]
    assert checkpoint["attrs"]["step"] == 5
    # The snapshot is the staging instant: no later than the end of the blocking part.
    assert events[0]["ts"] <= checkpoint["attrs"]["snapshot_ts"] <= events[1]["ts"]


def test_load_is_the_checkpoint_load_phase(fake, make_recorder, tmp_path: Path):
    rec = make_recorder(fake.url)
    ett_torch.save(rec, {"w": torch.arange(4.0)}, step=1, checkpoint_id=str(tmp_path / "c"),
                   no_dist=True)
    target = {"w": torch.zeros(4)}
    ett_torch.load(rec, target, checkpoint_id=str(tmp_path / "c"), no_dist=True)
    assert torch.equal(target["w"], torch.arange(4.0))
    assert rec.flush(5)
    assert phases(fake)[-2:] == [("phase_start", "checkpoint_load"),
                                 ("phase_end", "checkpoint_load")]


def test_the_attempt_is_torchelastics_restart_count(monkeypatch):
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    assert ett_torch.elastic_attempt() == 2
