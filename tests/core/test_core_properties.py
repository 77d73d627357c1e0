"""Properties over generated event streams: conservation, invariance, identities."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from itertools import pairwise

from core_strategies import Stream, streams
from hypothesis import given, settings
from hypothesis import strategies as st

from ett_core import JobComputation, Taxonomy, compute_job
from ett_core.diagnostics import DiagnosticsBuilder
from ett_core.events import ATTRS_READ, NO_ATTRS, order_events
from ett_core.instants import HOUR_US
from ett_core.rollup import hourly
from ett_core.scheduler import join
from ett_core.stalls import STEP_ATTR
from ett_core.timeline import OpenPhase, innermost, partition
from ett_core.window import clip

TAXONOMY = Taxonomy.default()
FAST = settings(max_examples=200, deadline=None)


def run(stream: Stream) -> JobComputation:
    events, now_us, timeout_us = stream
    return compute_job(events, taxonomy=TAXONOMY, now_us=now_us, heartbeat_timeout_us=timeout_us)


def totals(segments) -> Counter:
    out: Counter = Counter()
    for s in segments:
        out[(s.attempt, s.component, s.phase, s.owner, s.settled)] += s.gpu_us
    return out


@FAST
@given(streams)
def test_segments_tile_every_attempt_exactly_so_components_and_owners_sum_to_held(stream):
    comp = run(stream)
    result = comp.result
    for attempt in result.attempts:
        mine = [s for s in comp.segments if s.attempt == attempt.attempt]
        end = attempt.released_at_us if attempt.released_at_us is not None else None
        cursor = attempt.allocated_at_us
        for s in mine:
            assert s.start_us == cursor
            cursor = s.end_us
        assert cursor - attempt.allocated_at_us == attempt.held_us
        if end is not None:
            assert cursor == end
    assert sum(result.components.values()) == result.held_us
    assert sum(result.owners.values()) == result.held_us
    assert sum(result.phases.values()) == result.held_us


@FAST
@given(streams)
def test_nothing_is_ever_negative(stream):
    result = run(stream).result
    level1 = result.level1
    figures = [
        result.held_us,
        result.effective_us,
        result.at_risk_us,
        *result.components.values(),
        *result.owners.values(),
        *result.phases.values(),
        level1.tts_us,
        *level1.ttr_us,
        level1.in_loop_overhead_us,
        level1.final_shutdown_us,
        *(a.startup_us for a in result.attempts),
        *(v for term in level1.breakdown.values() for v in term.values()),
    ]
    assert min(figures, default=0) >= 0
    assert all(s.end_us > s.start_us for s in run(stream).segments)
    assert result.at_risk_us <= result.effective_us


@FAST
@given(streams, st.randoms(use_true_random=False))
def test_shuffling_and_duplicating_the_input_changes_nothing(stream, rnd: random.Random):
    events, now_us, timeout_us = stream
    again = list(events) + rnd.sample(events, k=rnd.randint(0, len(events)))
    rnd.shuffle(again)
    first, second = run(stream), run((again, now_us, timeout_us))
    assert first.segments == second.segments
    a, b = first.result.to_wire(), second.result.to_wire()
    a["diagnostics"].pop("duplicates_dropped")
    assert b["diagnostics"].pop("duplicates_dropped") == len(again) - len(events)
    assert a == b


@FAST
@given(streams)
def test_the_level1_identity_holds_and_each_term_breaks_down_by_component(stream):
    result = run(stream).result
    level1 = result.level1
    assert level1.total_us == result.held_us
    assert level1.effective_us == result.effective_us
    sums = {term: sum(by_component.values()) for term, by_component in level1.breakdown.items()}
    assert sums == {
        "effective": level1.effective_us,
        "tts": level1.tts_us,
        "ttr": sum(level1.ttr_us),
        "in_loop_overhead": level1.in_loop_overhead_us,
        "final_shutdown": level1.final_shutdown_us,
    }
    for component, seconds in result.components.items():
        assert sum(term[component] for term in level1.breakdown.values()) == seconds
    assert level1.nof == sum(level1.nof_by_cause.values())


@FAST
@given(streams, st.integers(-2 * HOUR_US, 2 * HOUR_US), st.floats(0, 1))
def test_two_windows_split_at_any_instant_add_up_to_the_whole(stream, margin, where):
    segments = run(stream).segments
    if not segments:
        return
    lo = min(s.start_us for s in segments)
    hi = max(s.end_us for s in segments)
    cut = lo + int((hi - lo) * where) + margin
    far = 10**18
    left, right = clip(segments, -far, cut), clip(segments, cut, far)
    assert totals(left) + totals(right) == totals(segments)
    assert all(s.end_us <= cut for s in left) and all(s.start_us >= cut for s in right)


@FAST
@given(streams)
def test_the_hourly_rollup_sums_to_the_segments(stream):
    segments = run(stream).segments
    rollup = hourly(segments)
    by_label: Counter = Counter()
    for (hour, component, phase, owner), (settled, unsettled) in rollup.items():
        assert hour % HOUR_US == 0
        by_label[(component, phase, owner, True)] += settled
        by_label[(component, phase, owner, False)] += unsettled
    expected: Counter = Counter()
    for s in segments:
        expected[(s.component, s.phase, s.owner, s.settled)] += s.gpu_us
    assert +by_label == +expected


@FAST
@given(streams)
def test_attrs_of_types_outside_attrs_read_never_change_the_result(stream):
    # The aggregator loads attrs only for ATTRS_READ, and of the others only rank 0's step
    # (service/store/results.py); the garbage streams put every kind of attrs on every type.
    events, now_us, timeout_us = stream
    stripped = [e if e.type in ATTRS_READ else e._replace(attrs=_step_only(e)) for e in events]
    assert run((stripped, now_us, timeout_us)) == run(stream)


def _step_only(event):
    attrs = event.attrs
    if event.rank not in (None, 0) or not isinstance(attrs, Mapping) or STEP_ATTR not in attrs:
        return NO_ATTRS
    return {STEP_ATTR: attrs[STEP_ATTR]}


def _owners_at_each_instant(frame) -> list[tuple[int, int, str, str]]:
    """The innermost-open-phase rule read instant by instant: between two consecutive event
    instants (clamped to the frame) the owner is the one left by every event up to the
    first; adjacent intervals of one owner merged."""
    component_of = dict(TAXONOMY.phase_component).get
    stack: list[OpenPhase] = []

    def clamped(e) -> int:
        return min(max(e.ts_us, frame.start_us), frame.end_us)

    instants = sorted({frame.start_us, frame.end_us} | {clamped(e) for e in frame.events})
    pending = list(frame.events)
    pieces: list[tuple[int, int, str, str]] = []
    for lo, hi in pairwise(instants):
        while pending and clamped(pending[0]) <= lo:
            e = pending.pop(0)
            if e.type == "phase_start":
                stack.append(OpenPhase(e.phase, lo, e.attrs.get("background") is True,
                                       component_of(e.phase) or "unattributed"))
            elif e.type == "phase_end":
                at = [i for i, entry in enumerate(stack) if entry.phase == e.phase]
                if at:
                    del stack[at[-1]]
            elif e.type == "failure" and e.event_id == frame.failure_event_id:
                stack.clear()
        owner = innermost(stack)
        if pieces and pieces[-1][1] == lo and pieces[-1][2:] == owner:
            pieces[-1] = (pieces[-1][0], hi, *owner)
        else:
            pieces.append((lo, hi, *owner))
    return pieces


@FAST
@given(streams)
def test_the_partition_follows_the_owner_at_every_instant_whatever_the_heartbeats(stream):
    events, now_us, timeout_us = stream
    diag = DiagnosticsBuilder()
    by_attempt: dict[int, list] = {}
    for event in order_events(e for e in events if e.on_timeline)[0]:
        by_attempt.setdefault(event.attempt, []).append(event)
    frames, _views = join(by_attempt, now_us=now_us, heartbeat_timeout_us=timeout_us,
                          diag=diag)
    for frame in frames:
        assert list(partition(frame, TAXONOMY, diag).pieces) == _owners_at_each_instant(frame)
