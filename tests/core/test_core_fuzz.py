"""Random event streams with wrong types and nonsense values never make the core raise."""

from __future__ import annotations

import random

from core_strategies import garbage_streams
from hypothesis import given, settings

from ett_core import Event, Taxonomy, compute_job
from ett_core.events import EVENT_TYPES

TAXONOMY = Taxonomy.default()
MINUTE = 60_000_000


def anything(rnd: random.Random, *good):
    """A plausible value most of the time, else something of the wrong type or range."""
    if good and rnd.random() < 0.7:
        return rnd.choice(good)
    return rnd.choice(
        [None, -1, 0, 2**70, 1.5, float("nan"), "", "x" * 300, True, [], {}, {"k": [1]}, b"\x00"]
    )


def random_event(rnd: random.Random, index: int, base: int) -> Event:
    return Event(
        event_id=anything(rnd, f"id-{index}", f"id-{rnd.randint(0, index)}"),
        ts_us=anything(rnd, base + rnd.randint(-60, 600) * MINUTE, base),
        job_id=anything(rnd, "job", "job", "other"),
        attempt=anything(rnd, 0, 1, 2, 7),
        model=anything(rnd, "m"),
        type=anything(rnd, *EVENT_TYPES, "explode"),
        phase=anything(
            rnd, "training", "checkpoint_save", "compilation", "mystery", "lost_progress"
        ),
        gpus=anything(rnd, 1, 8),
        team=anything(rnd, "team-a"),
        rank=anything(rnd, 0, 1),
        attrs=anything(
            rnd,
            {},
            {"background": True},
            {"cause": anything(rnd, "infra", "user")},
            {"reason": anything(rnd, "failed", "cancelled", "preempted")},
            {"snapshot_ts": anything(rnd, "2023-11-14T22:13:20Z", 1.7e9, "2023-13-45")},
        ),
    )


def test_random_streams_of_any_shape_never_raise():
    rnd = random.Random(20240501)
    for _ in range(400):
        base = rnd.randint(0, 3 * 10**15)
        events = [random_event(rnd, i, base) for i in range(rnd.randint(0, 60))]
        comp = compute_job(
            events,
            taxonomy=TAXONOMY,
            now_us=base + rnd.randint(-60, 900) * MINUTE,
            heartbeat_timeout_us=rnd.randint(0, 60) * MINUTE,
        )
        comp.result.to_wire()
        assert comp.result.level1.total_us == comp.result.held_us


@settings(max_examples=200, deadline=None)
@given(garbage_streams())
def test_garbage_ish_generated_streams_never_raise(stream):
    events, now_us, timeout_us = stream
    compute_job(
        events, taxonomy=TAXONOMY, now_us=now_us, heartbeat_timeout_us=timeout_us
    ).result.to_wire()
