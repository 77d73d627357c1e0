"""Attempt frames: where each attempt starts and ends, and why it ended (docs/model.md section 5).

A frame is decided from one attempt's timeline events plus the start of the next attempt,
`now` and the heartbeat timeout. Everything inside the frame (phases, checkpoints) is the
timeline's job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ett_core.diagnostics import DiagnosticsBuilder
from ett_core.events import FAILURE_CAUSES, RELEASE_REASONS, Event

_RELEASE_FAILURE_CAUSE = {"failed": "infra", "preempted": "preemption"}
DEFAULT_GPUS = 1


@dataclass(frozen=True, slots=True)
class AttemptFrame:
    attempt: int
    start_us: int
    end_us: int
    gpus: int
    end_cause: str  # completed, cancelled, infra, user, preemption, lost, running
    is_running: bool
    # The interruption: its instant F and cause. Set for failed, preempted and lost
    # attempts, and for an attempt still running after a reported failure.
    failure_us: int | None
    cause: str | None
    failure_event_id: str | None
    last_news_us: int
    allocated: bool
    # The attempt's timeline events inside [start, end], in order.
    events: tuple[Event, ...]

    @property
    def held_us(self) -> int:
        return self.end_us - self.start_us

    @property
    def interrupted(self) -> bool:
        return self.failure_us is not None

    @property
    def completed_normally(self) -> bool:
        return not self.is_running and self.failure_us is None


@dataclass(frozen=True, slots=True)
class _Facts:
    start_us: int
    allocated: bool
    released: Event | None
    failure: Event | None
    gpus: int | None
    last_news_us: int


def _valid_gpus(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    return None


def _facts(events: Sequence[Event], diag: DiagnosticsBuilder) -> _Facts:
    allocations = [e for e in events if e.type == "allocated"]
    if len(allocations) > 1:
        diag.add("extra_allocated", len(allocations) - 1)
    start_us = allocations[0].ts_us if allocations else events[0].ts_us
    released = None
    failure = None
    for event in events:
        if event.type == "released":
            if released is None:
                released = event
            else:
                diag.add("extra_released")
    end_bound = released.ts_us if released is not None else None
    for event in events:
        if event.type == "failure" and (end_bound is None or event.ts_us <= end_bound):
            if failure is None:
                failure = event
            else:
                diag.add("extra_failures")
    gpus = None
    # `allocated` sorts first at its instant, so its gpus win when it has them.
    for event in allocations + list(events):
        gpus = _valid_gpus(event.gpus)
        if gpus is not None:
            break
    return _Facts(start_us, bool(allocations), released, failure, gpus, events[-1].ts_us)


def _failure_cause(event: Event, diag: DiagnosticsBuilder) -> str:
    cause = event.attrs.get("cause")
    if cause in FAILURE_CAUSES:
        return cause
    diag.add("failure_cause_defaulted")  # an unknown failure is most likely the platform's
    return "infra"


def _release_reason(event: Event, diag: DiagnosticsBuilder) -> str:
    reason = event.attrs.get("reason")
    if reason in RELEASE_REASONS:
        return reason
    diag.add("release_reason_defaulted")
    return "completed"


def build_frames(
    by_attempt: Mapping[int, Sequence[Event]],
    *,
    now_us: int,
    heartbeat_timeout_us: int,
    diag: DiagnosticsBuilder,
) -> list[AttemptFrame]:
    """Frame every attempt that has timeline events, in attempt order."""
    numbers = sorted(by_attempt)
    facts = {k: _facts(by_attempt[k], diag) for k in numbers}
    frames: list[AttemptFrame] = []
    previous_gpus: int | None = None
    first_gpus = next((f.gpus for f in facts.values() if f.gpus is not None), None)
    for index, k in enumerate(numbers):
        fact = facts[k]
        start = fact.start_us
        next_start = facts[numbers[index + 1]].start_us if index + 1 < len(numbers) else None
        failure = fact.failure
        cause = _failure_cause(failure, diag) if failure is not None else None
        failure_us = max(failure.ts_us, start) if failure is not None else None
        is_running = False
        if fact.released is not None:
            end = max(fact.released.ts_us, start)
            if failure is None:
                reason = _release_reason(fact.released, diag)
                cause = _RELEASE_FAILURE_CAUSE.get(reason)
                failure_us = end if cause is not None else None
                end_cause = cause or reason
            else:
                end_cause = cause  # an explicit failure outranks the release's reason
        else:
            last_news = fact.last_news_us
            if next_start is not None and next_start - last_news <= heartbeat_timeout_us:
                # The restart is the best evidence of when this attempt stopped holding.
                end = max(next_start, start)
                diag.inferred_end_attempts.append(k)
            elif next_start is not None or now_us - last_news > heartbeat_timeout_us:
                end = last_news
                diag.inferred_end_attempts.append(k)
            else:
                end = max(now_us, last_news)
                is_running = True
            if is_running:
                end_cause = "running"
            elif failure is None:
                cause, failure_us, end_cause = "lost", end, "lost"
            else:
                end_cause = cause
        if failure_us is not None and failure_us > end:
            failure_us = end
        gpus = fact.gpus or previous_gpus or first_gpus
        if gpus is None:
            gpus = DEFAULT_GPUS
            diag.gpus_defaulted_attempts.append(k)
        previous_gpus = gpus
        frames.append(
            AttemptFrame(
                attempt=k,
                start_us=start,
                end_us=end,
                gpus=gpus,
                end_cause=end_cause,  # type: ignore[arg-type]
                is_running=is_running,
                failure_us=failure_us,
                cause=cause,
                failure_event_id=failure.event_id if failure is not None else None,
                last_news_us=fact.last_news_us,
                allocated=fact.allocated,
                events=_inside(by_attempt[k], start, end, diag),
            )
        )
    return frames


def _inside(
    events: Sequence[Event], start: int, end: int, diag: DiagnosticsBuilder
) -> tuple[Event, ...]:
    kept = []
    for event in events:
        if event.ts_us > end:
            diag.add("events_after_end")
        else:
            if event.ts_us < start:
                diag.add("events_before_allocation")
            kept.append(event)
    return tuple(kept)
