"""Properties of the scheduler's word over generated streams: the trainer's plausible streams
with a scheduler's allocations, releases and failures around (or instead of) them."""

from __future__ import annotations

from core_strategies import MINUTE, Stream, streams
from hypothesis import given, settings
from hypothesis import strategies as st

from ett_core import Event, Taxonomy, compute_job
from ett_core.attempts import build_frames
from ett_core.diagnostics import DiagnosticsBuilder
from ett_core.scheduler import join

TAXONOMY = Taxonomy.default()
FAST = settings(max_examples=200, deadline=None)
SCHED = "scheduler"


def _sched(n: int, kind: str, ts: int, attempt: int, **fields) -> Event:
    attrs = {"source": SCHED, **fields.pop("attrs", {})}
    return Event(event_id=f"s{n:04d}", ts_us=ts, job_id="job", attempt=attempt, model="m",
                 type=kind, attrs=attrs, **fields)


@st.composite
def joined_streams(draw: st.DrawFn) -> Stream:
    """A trainer's stream with a scheduler's events for some attempts, and sometimes an
    attempt only the scheduler reports."""
    events, now, timeout = draw(streams)
    by_attempt: dict[int, list[Event]] = {}
    for event in events:
        by_attempt.setdefault(event.attempt, []).append(event)
    extra: list[Event] = []
    attempts = sorted(by_attempt)
    if draw(st.booleans()):
        attempts.append((attempts[-1] if attempts else -1) + 1)
    for attempt in attempts:
        if not draw(st.integers(0, 3)):
            continue
        mine = by_attempt.get(attempt, [])
        first = min((e.ts_us for e in mine), default=now - draw(st.integers(0, 200)) * MINUTE)
        last = max((e.ts_us for e in mine), default=first)
        if draw(st.integers(0, 5)):
            ts = first - draw(st.integers(-2, 10)) * MINUTE
            extra.append(_sched(len(extra), "allocated", ts, attempt,
                                gpus=draw(st.sampled_from([1, 8])),
                                attrs={"queued_at": (ts - draw(st.integers(0, 60)) * MINUTE)
                                       / 1_000_000}))
        if not draw(st.integers(0, 5)):
            extra.append(_sched(len(extra), "failure", last + draw(st.integers(-5, 5)) * MINUTE,
                                attempt, attrs={"cause": draw(st.sampled_from(
                                    ["infra", "preemption"]))}))
        if draw(st.integers(0, 4)):
            reason = draw(st.sampled_from(["completed", "failed", "preempted", "cancelled"]))
            extra.append(_sched(len(extra), "released", last + draw(st.integers(-2, 30)) * MINUTE,
                                attempt, attrs={"reason": reason}))
    return [*events, *extra], now, timeout


def run(stream: Stream):
    events, now_us, timeout_us = stream
    return compute_job(events, taxonomy=TAXONOMY, now_us=now_us, heartbeat_timeout_us=timeout_us)


@FAST
@given(joined_streams())
def test_components_tile_held_time_exactly_with_the_scheduler(stream):
    comp = run(stream)
    result = comp.result
    for attempt in result.attempts:
        cursor = attempt.allocated_at_us
        for s in (s for s in comp.segments if s.attempt == attempt.attempt):
            assert s.start_us == cursor and s.end_us > s.start_us
            cursor = s.end_us
        assert cursor - attempt.allocated_at_us == attempt.held_us
    assert sum(result.components.values()) == result.held_us
    assert sum(result.owners.values()) == result.held_us
    assert sum(result.phases.values()) == result.held_us
    assert result.queue_us >= 0


@FAST
@given(joined_streams())
def test_the_level1_identity_holds_with_the_scheduler(stream):
    result = run(stream).result
    level1 = result.level1
    assert level1.total_us == result.held_us
    assert level1.effective_us == result.effective_us
    for component, amount in result.components.items():
        assert sum(term[component] for term in level1.breakdown.values()) == amount
    assert min((*level1.ttr_us, level1.tts_us, level1.in_loop_overhead_us,
                level1.final_shutdown_us), default=0) >= 0


@FAST
@given(streams)
def test_trainer_only_jobs_are_framed_exactly_as_before(stream):
    events, now_us, timeout_us = stream
    by_attempt: dict[int, list[Event]] = {}
    for event in sorted(events, key=lambda e: (e.ts_us, e.event_id)):
        by_attempt.setdefault(event.attempt, []).append(event)
    joined, views = join(by_attempt, now_us=now_us, heartbeat_timeout_us=timeout_us,
                         diag=DiagnosticsBuilder())
    before = build_frames(by_attempt, now_us=now_us, heartbeat_timeout_us=timeout_us,
                          diag=DiagnosticsBuilder())
    assert views == {}
    assert joined == before


@st.composite
def scheduler_only_streams(draw: st.DrawFn) -> Stream:
    events: list[Event] = []
    t = draw(st.integers(0, 2 * 10**15))
    for attempt in range(draw(st.integers(1, 4))):
        t += draw(st.integers(0, 30)) * MINUTE
        events.append(_sched(len(events), "allocated", t, attempt, gpus=draw(st.sampled_from(
            [1, 8]))))
        if draw(st.booleans()):
            t += draw(st.integers(0, 5)) * MINUTE
            events.append(_sched(len(events), "phase_start", t, attempt, phase="scheduling"))
            t += draw(st.integers(0, 5)) * MINUTE
            events.append(_sched(len(events), "phase_end", t, attempt, phase="scheduling"))
        t += draw(st.integers(0, 60)) * MINUTE
        if not draw(st.integers(0, 3)):
            events.append(_sched(len(events), "failure", t, attempt, attrs={"cause": "infra"}))
            t += draw(st.integers(0, 5)) * MINUTE
        reason = draw(st.sampled_from(["completed", "failed", "preempted", "cancelled"]))
        events.append(_sched(len(events), "released", t, attempt, attrs={"reason": reason}))
    return events, t + draw(st.integers(0, 100)) * MINUTE, 10 * MINUTE


@FAST
@given(scheduler_only_streams())
def test_scheduler_only_jobs_are_computed_as_before_with_their_time_named_unreported(stream):
    events, now_us, timeout_us = stream
    plain = [e._replace(attrs={k: v for k, v in e.attrs.items() if k != "source"})
             for e in events]
    joined, before = run(stream).result, run((plain, now_us, timeout_us)).result
    assert joined.held_us == before.held_us
    assert [(a.allocated_at_us, a.held_us, a.end_cause, a.failure_at_us, a.startup_us)
            for a in joined.attempts] == [
        (a.allocated_at_us, a.held_us, a.end_cause, a.failure_at_us, a.startup_us)
        for a in before.attempts]
    assert dict(joined.components) == dict(before.components)
    assert joined.level1.breakdown == before.level1.breakdown
    assert joined.level1.ttr_causes == before.level1.ttr_causes
    renamed = dict(before.phases)
    uncovered = renamed.pop("unattributed", 0)
    assert dict(joined.phases) == ({**renamed, "unreported": uncovered} if uncovered
                                   else renamed)
    assert joined.uninstrumented_held_us == joined.held_us


@FAST
@given(joined_streams(), st.randoms(use_true_random=False))
def test_order_and_redelivery_change_nothing_with_the_scheduler(stream, rnd):
    events, now_us, timeout_us = stream
    again = list(events) + rnd.sample(events, k=rnd.randint(0, len(events)))
    rnd.shuffle(again)
    first, second = run(stream), run((again, now_us, timeout_us))
    assert first.segments == second.segments
    assert first.result.attempts == second.result.attempts


@st.composite
def mixed_garbage(draw: st.DrawFn) -> Stream:
    """Any event of a garbage stream may claim to be the scheduler's."""
    from core_strategies import garbage_streams

    events, now, timeout = draw(garbage_streams())
    marked = [e._replace(attrs={**e.attrs, "source": SCHED}) if draw(st.booleans()) else e
              for e in events]
    return marked, now, timeout


@FAST
@given(mixed_garbage())
def test_any_mix_of_writers_keeps_conservation_and_the_identity(stream):
    comp = run(stream)
    result = comp.result
    assert sum(result.components.values()) == result.held_us
    assert sum(result.phases.values()) == result.held_us
    assert result.level1.total_us == result.held_us
    assert all(s.end_us > s.start_us for s in comp.segments)
    assert sum(a.held_us for a in result.attempts) == result.held_us
