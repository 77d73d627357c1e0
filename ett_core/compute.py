"""compute_job: one job's events -> JobResult and timeline segments.

Pure: `now_us` and the heartbeat timeout are arguments and the clock is never read, so
the same events always give the same answer (the aggregator and tests rely on that).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ett_core import scheduler
from ett_core.attempts import AttemptFrame
from ett_core.checkpoints import AttemptCheckpoints, attempt_checkpoints
from ett_core.diagnostics import DiagnosticsBuilder
from ett_core.events import NO_ATTRS, PHASE_TYPES, TYPE_RANK, Event, order_events
from ett_core.instants import MAX_TS_US, MIN_TS_US
from ett_core.level1 import AttemptTerms, attempt_terms, combine
from ett_core.progress import label, progress_of
from ett_core.result import AttemptResult, JobResult
from ett_core.segments import Segment, to_segments
from ett_core.stalls import (
    AttemptStalls,
    advances_of,
    attempt_stalls,
    mark_stalled,
    snapshot_from_steps,
)
from ett_core.taxonomy import COMPONENTS, EFFECTIVE, UNASSIGNED_TEAM, Taxonomy
from ett_core.timeline import partition


@dataclass(frozen=True, slots=True)
class JobComputation:
    result: JobResult
    segments: tuple[Segment, ...]
    # Per attempt, what checkpoint advice needs (ett_core.checkpoints).
    checkpoints: tuple[AttemptCheckpoints, ...] = ()
    # Per attempt, progress by steps and its stalls (ett_core.stalls).
    stalls: tuple[AttemptStalls, ...] = ()
    # What ett_core.resume starts from; not part of the answer (never compared).
    parts: JobParts | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class JobParts:
    """The intermediate values of one computation that a resumed one reuses."""

    events: tuple[Event, ...]  # the job's own events, cleaned, de-duplicated, in order
    frames: tuple[AttemptFrame, ...]
    terms: tuple[AttemptTerms, ...]
    diagnostics: DiagnosticsBuilder
    scheduler: bool  # whether any event is the scheduler's


def _usable(event: Event) -> bool:
    """Whether an event can be placed at all; the service validates, the fuzzer does not.

    `type(...) is` rather than isinstance: it is the hot loop of a 10,000-event job, and it
    also keeps bools out of integer fields.
    """
    ts, attempt, kind = event.ts_us, event.attempt, event.type
    if type(ts) is not int or type(attempt) is not int or type(kind) is not str:
        return False
    if not (MIN_TS_US <= ts <= MAX_TS_US and attempt >= 0 and kind in TYPE_RANK):
        return False
    if not (type(event.event_id) is str and type(event.job_id) is str and type(event.model) is str):
        return False
    if kind in PHASE_TYPES:
        return type(event.phase) is str and event.phase != ""
    return True


def _clean(events: Iterable[Event], diag: DiagnosticsBuilder) -> list[Event]:
    usable = []
    for event in events:
        if not _usable(event):
            diag.add("invalid_events")
            continue
        attrs = event.attrs
        # The two common cases first: isinstance against the Mapping ABC is slow.
        if attrs is not NO_ATTRS and type(attrs) is not dict and not isinstance(attrs, Mapping):
            event = event._replace(attrs=NO_ATTRS)
        usable.append(event)
    return usable


def _model_team(ordered: tuple[Event, ...], model: str, taxonomy: Taxonomy) -> str:
    # Configuration wins; else the first team reported, in event order (not arrival), so
    # the answer is stable under redelivery.
    configured = taxonomy.team_of_model(model)
    if configured is not None:
        return configured
    for event in ordered:
        if isinstance(event.team, str) and event.team:
            return event.team
    return UNASSIGNED_TEAM


def compute_job(
    events: Iterable[Event],
    *,
    taxonomy: Taxonomy,
    now_us: int,
    heartbeat_timeout_us: int,
) -> JobComputation:
    """Compute one job from its events (any order, duplicates allowed)."""
    diag = DiagnosticsBuilder()
    ordered, duplicates = order_events(_clean(events, diag))
    diag.add("duplicates_dropped", duplicates)
    job_id = ordered[0].job_id if ordered else ""
    mine = tuple(e for e in ordered if e.job_id == job_id)
    diag.add("foreign_job_events", len(ordered) - len(mine))
    # The trainer names the model it trains; a scheduler's mapping names it only for a job
    # no trainer reports (docs/model.md, "The scheduler's word").
    named_by = mine
    has_scheduler = any(map(scheduler.is_scheduler, mine))
    if has_scheduler:
        named_by = tuple(e for e in mine if not scheduler.is_scheduler(e)) or mine
    model = named_by[0].model if named_by else ""
    team = _model_team(named_by, model, taxonomy)
    if named_by is not mine:
        diag.mapping_conflicts = scheduler.mapping_conflicts(mine, model, team)

    by_attempt: dict[int, list[Event]] = defaultdict(list)
    for event in mine:
        if event.on_timeline:
            by_attempt[event.attempt].append(event)
        else:
            diag.add("non_timeline_events")
    frames, views = scheduler.join(
        by_attempt, now_us=now_us, heartbeat_timeout_us=heartbeat_timeout_us, diag=diag
    )

    segments: list[Segment] = []
    attempts: list[AttemptResult] = []
    terms = []
    labelled = []
    # Steps (ett_core.stalls): each attempt's advances; the first is its first step, which
    # stands in for the checkpoint the attempt before it restarted from.
    advances = [advances_of(f) for f in frames]
    next_steps = [a[0][1] if a else None for a in [*advances[1:], []]][: len(frames)]
    stall_owner = taxonomy.stall_owner_of(team)
    stalls = []
    for frame, steps, next_step in zip(frames, advances, next_steps, strict=True):
        view = views.get(frame.attempt)
        timeline = scheduler.name_gaps(view, frame, partition(frame, taxonomy, diag), taxonomy)
        progress = snapshot_from_steps(frame, progress_of(frame, timeline, diag), steps,
                                       next_step, diag)
        pieces = label(frame, timeline, progress, taxonomy, team)
        pieces = scheduler.own_unreported(view, frame, pieces, taxonomy, team)
        stalls.append(attempt_stalls(frame, steps, taxonomy, diag))
        pieces = mark_stalled(frame, pieces, stalls[-1], stall_owner)
        labelled.append((timeline, pieces))
        own_terms = attempt_terms(frame, timeline, pieces)
        terms.append(own_terms)
        attempt_segments = to_segments(frame.attempt, frame.gpus, pieces)
        segments.extend(attempt_segments)
        attempts.append(_attempt_result(frame, own_terms.startup_us, attempt_segments, view))
    level1 = combine(frames, terms)
    ttr_by_attempt = dict(zip(level1.ttr_attempts, level1.ttr_us, strict=True))
    checkpoints = tuple(
        attempt_checkpoints(frame, timeline, pieces, ttr_by_attempt)
        for frame, (timeline, pieces) in zip(frames, labelled, strict=True)
    )

    components = dict.fromkeys(COMPONENTS, 0)
    phases: dict[str, int] = defaultdict(int)
    owners: dict[str, int] = defaultdict(int)
    at_risk = 0
    for segment in segments:
        duration = segment.duration_us
        components[segment.component] += duration
        phases[segment.phase] += duration
        owners[segment.owner] += duration
        if not segment.settled and segment.component == EFFECTIVE:
            at_risk += duration

    result = JobResult(
        job_id=job_id,
        model=model,
        team=team,
        state=_state(frames),
        attempts=tuple(attempts),
        held_us=sum(f.held_us for f in frames),
        effective_us=components[EFFECTIVE],
        at_risk_us=at_risk,
        components=MappingProxyType(components),
        phases=MappingProxyType(dict(phases)),
        owners=MappingProxyType(dict(owners)),
        level1=level1,
        diagnostics=diag.freeze(),
        stalls=tuple(stalls),
        queue_us=sum(v.queue_us for v in views.values()),
    )
    return JobComputation(
        result=result, segments=tuple(segments), checkpoints=checkpoints, stalls=tuple(stalls),
        parts=JobParts(mine, tuple(frames), tuple(terms), diag, has_scheduler),
    )


def _attempt_result(frame: AttemptFrame, startup_us: int, segments: list[Segment],
                    view: scheduler.SchedulerView | None) -> AttemptResult:
    return AttemptResult(
        attempt=frame.attempt,
        allocated_at_us=frame.start_us,
        released_at_us=None if frame.is_running else frame.end_us,
        gpus=frame.gpus,
        end_cause=frame.end_cause,
        held_us=frame.held_us,
        startup_us=startup_us,
        failure_at_us=frame.failure_us,
        at_risk_us=sum(
            s.duration_us for s in segments if not s.settled and s.component == EFFECTIVE
        ),
        scheduler=view,
    )


def _state(frames: list[AttemptFrame]) -> str:
    # A job with no timeline events yet has nothing ended: it is reported as running.
    if not frames:
        return "running"
    return frames[-1].end_cause
