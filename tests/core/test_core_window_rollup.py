"""window.clip and rollup.hourly on hand-made segments."""

from __future__ import annotations

from ett_core import Segment
from ett_core.instants import HOUR_US
from ett_core.rollup import hourly
from ett_core.window import clip

H = HOUR_US


def seg(
    start: int, end: int, *, gpus: int = 8, phase: str = "training", settled: bool = True
) -> Segment:
    component = "effective_training" if phase == "training" else "initialization"
    return Segment(0, start, end, gpus, component, phase, "team", settled)


def test_clip_keeps_only_the_part_inside_the_window():
    segments = [seg(0, 10), seg(10, 20, phase="launcher_init"), seg(20, 30)]
    assert clip(segments, 5, 25) == (
        seg(5, 10),
        seg(10, 20, phase="launcher_init"),
        seg(20, 25),
    )


def test_a_window_with_nothing_held_clips_to_nothing():
    assert clip([seg(0, 10)], 10, 20) == ()
    assert clip([seg(0, 10)], 20, 10) == ()


def test_hourly_splits_a_segment_at_hour_boundaries_and_weights_by_gpus():
    # 8 GPUs from 00:30 to 02:15: 30 min in hour 0, 60 in hour 1, 15 in hour 2.
    rollup = hourly([seg(H // 2, 2 * H + H // 4)])
    assert rollup == {
        (0, "effective_training", "training", "team"): (8 * H // 2, 0),
        (H, "effective_training", "training", "team"): (8 * H, 0),
        (2 * H, "effective_training", "training", "team"): (8 * H // 4, 0),
    }


def test_hourly_keeps_settled_and_unsettled_apart():
    rollup = hourly([seg(0, 10, gpus=1), seg(10, 30, gpus=1, settled=False)])
    assert rollup == {(0, "effective_training", "training", "team"): (10, 20)}
