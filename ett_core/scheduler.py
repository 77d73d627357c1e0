"""The scheduler's word (docs/model.md, "The scheduler's word"): held time from the scheduler.

Events whose `attrs.source` is "scheduler" come from a scheduler adapter (Slurm's hooks and
reconciler); every other event is the trainer's. For an attempt the scheduler reports, the
scheduler's allocation and release bound the held time, the trainer's events only say what
happened inside, and the gaps the trainer cannot see get derived phases:

- `hardware_setup`: from the allocation to the trainer's first timeline event, where no
  reported phase covers the time;
- `teardown`: from the trainer's release to the scheduler's;
- `unreported`: from the trainer's last news to the end when it neither released nor failed,
  and the whole of an attempt no trainer reported (an uninstrumented job).

Attempts the scheduler does not report are framed exactly as before (`attempts.build_frames`
on the trainer's events), so trainer-only jobs keep their results to the microsecond.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from ett_core.attempts import (
    _RELEASE_FAILURE_CAUSE,
    DEFAULT_GPUS,
    AttemptFrame,
    _failure_cause,
    _release_reason,
    _valid_gpus,
    build_frames,
)
from ett_core.diagnostics import DiagnosticsBuilder
from ett_core.events import Event, sort_key
from ett_core.instants import parse_instant_us
from ett_core.progress import Labelled
from ett_core.taxonomy import EFFECTIVE, UNATTRIBUTED, UNREPORTED, WASTED, Taxonomy
from ett_core.timeline import AttemptTimeline, Piece

SCHEDULER = "scheduler"
HARDWARE_SETUP = "hardware_setup"
TEARDOWN = "teardown"


def is_scheduler(event: Event) -> bool:
    attrs = event.attrs
    return bool(attrs) and attrs.get("source") == SCHEDULER


@dataclass(frozen=True, slots=True)
class SchedulerView:
    """What the scheduler adds to one attempt: its span, the queue, and where the gaps lie."""

    attempt: int
    allocated_us: int | None  # the scheduler's allocation
    released_us: int | None  # the scheduler's release
    queued_at_us: int | None  # submitted or eligible (attrs.queued_at)
    trainer_first_us: int | None  # None: no trainer reported this attempt
    trainer_last_us: int | None
    hardware_until_us: int | None  # uncovered time before this is hardware_setup
    teardown_from_us: int | None  # the trainer's release
    unreported_from_us: int | None  # the silent tail (or the whole uninstrumented attempt)

    @property
    def instrumented(self) -> bool:
        return self.trainer_first_us is not None

    @property
    def queue_us(self) -> int:
        if self.queued_at_us is None or self.allocated_us is None:
            return 0
        return max(0, self.allocated_us - self.queued_at_us)


def _first(events: Sequence[Event], kind: str) -> Event | None:
    return next((e for e in events if e.type == kind), None)


def _queued_at(allocation: Event | None) -> int | None:
    if allocation is None:
        return None
    raw = allocation.attrs.get("queued_at")
    if raw is None:
        return None
    queued = parse_instant_us(raw)
    return queued if queued is not None and queued <= allocation.ts_us else None


def _gpus(allocation: Event | None, trainer: AttemptFrame | None) -> int | None:
    scheduler_gpus = _valid_gpus(allocation.gpus) if allocation is not None else None
    # An adapter that could not read the GPU count from the scheduler sends its configured
    # fallback and says so: then a trainer that reported its own count knows better.
    assumed = allocation is not None and allocation.attrs.get("gpus_assumed") is True
    if trainer is not None and trainer.gpus and (scheduler_gpus is None or assumed):
        return trainer.gpus
    return scheduler_gpus


def join(
    by_attempt: Mapping[int, Sequence[Event]],
    *,
    now_us: int,
    heartbeat_timeout_us: int,
    diag: DiagnosticsBuilder,
) -> tuple[list[AttemptFrame], dict[int, SchedulerView]]:
    """Frame every attempt from both writers; the views name the gaps of scheduler attempts."""
    scheduler: dict[int, list[Event]] = {}
    trainer: dict[int, list[Event]] = {}
    for k, events in by_attempt.items():
        mine = [e for e in events if is_scheduler(e)]
        if mine:
            scheduler[k] = mine
            rest = [e for e in events if not is_scheduler(e)]
            if rest:
                trainer[k] = rest
        else:
            trainer[k] = list(events)
    if not scheduler:
        # The common case, a trainer-only job: framed exactly as before.
        return build_frames(by_attempt, now_us=now_us, heartbeat_timeout_us=heartbeat_timeout_us,
                            diag=diag), {}
    alone = {k: v for k, v in trainer.items() if k not in scheduler}
    # The trainer's own framing of an attempt the scheduler reports is only read for its
    # facts (gpus, allocation, open or not): its inferences (an end guessed from silence,
    # events "before the allocation") would be wrong in the diagnostics, so they stay out.
    trainer_frames = {
        f.attempt: f
        for part, d in ((alone, diag),
                        ({k: v for k, v in trainer.items() if k in scheduler},
                         DiagnosticsBuilder()))
        for f in build_frames(part, now_us=now_us, heartbeat_timeout_us=heartbeat_timeout_us,
                              diag=d)
    }
    numbers = sorted(by_attempt)
    starts: dict[int, int] = {}
    for k in numbers:
        allocation = _first(scheduler.get(k, ()), "allocated")
        if allocation is not None:
            starts[k] = allocation.ts_us
        elif k in trainer_frames:
            first = trainer_frames[k].start_us
            starts[k] = min(first, scheduler[k][0].ts_us) if k in scheduler else first
        else:
            starts[k] = scheduler[k][0].ts_us
    frames: list[AttemptFrame] = []
    views: dict[int, SchedulerView] = {}
    previous_gpus: int | None = None
    for index, k in enumerate(numbers):
        if k not in scheduler:
            frame = trainer_frames[k]
        else:
            next_start = starts[numbers[index + 1]] if index + 1 < len(numbers) else None
            frame, views[k] = _joined(
                k, scheduler[k], trainer.get(k, []), trainer_frames.get(k), starts[k],
                next_start, now_us=now_us, heartbeat_timeout_us=heartbeat_timeout_us, diag=diag,
                previous_gpus=previous_gpus)
        previous_gpus = frame.gpus
        frames.append(frame)
    return frames, views


def _joined(
    k: int,
    scheduler: list[Event],
    trainer: list[Event],
    trainer_frame: AttemptFrame | None,
    start: int,
    next_start: int | None,
    *,
    now_us: int,
    heartbeat_timeout_us: int,
    diag: DiagnosticsBuilder,
    previous_gpus: int | None,
) -> tuple[AttemptFrame, SchedulerView]:
    allocation = _first(scheduler, "allocated")
    release = _first(scheduler, "released")
    trainer_release = _first(trainer, "released")
    trainer_last = trainer[-1].ts_us if trainer else None
    last_news = max(e.ts_us for e in (*scheduler, *trainer))

    is_running = False
    if release is not None:
        end = release.ts_us
    elif next_start is not None:
        # The scheduler moved on to the next attempt, so this one no longer holds.
        end = next_start
        diag.add("scheduler_release_missing")
    elif trainer_release is not None and now_us - trainer_release.ts_us > heartbeat_timeout_us:
        # The epilog's word never came; the trainer's release is the best evidence left.
        end = trainer_release.ts_us
        diag.add("scheduler_release_missing")
    elif allocation is not None:
        end, is_running = max(now_us, last_news), True
    elif trainer_frame is not None:
        end, is_running = trainer_frame.end_us, trainer_frame.is_running
    else:
        end = last_news
        is_running = now_us - last_news <= heartbeat_timeout_us
        if is_running:
            end = max(now_us, last_news)
    end = max(end, start)

    failures = sorted((e for e in (*scheduler, *trainer) if e.type == "failure" and e.ts_us <= end),
                      key=sort_key)
    failure = failures[0] if failures else None
    if len(failures) > 1:
        diag.add("extra_failures", len(failures) - 1)
    trainer_failed = any(e.type == "failure" for e in trainer)
    silent = bool(trainer) and trainer_release is None and not trainer_failed
    silent_tail = silent and (
        not is_running or trainer_last is None or now_us - trainer_last > heartbeat_timeout_us)

    cause: str | None = None
    failure_us: int | None = None
    if failure is not None:
        cause = _failure_cause(failure, diag)
        failure_us = failure.ts_us
        if silent and trainer_last is not None:
            failure_us = min(failure_us, trainer_last)
        end_cause = "running" if is_running else cause
    elif trainer_release is not None and trainer_release.ts_us <= end:
        reason = _release_reason(trainer_release, diag)
        cause = _RELEASE_FAILURE_CAUSE.get(reason)
        failure_us = trainer_release.ts_us if cause is not None else None
        end_cause = "running" if is_running else cause or reason
    elif is_running:
        end_cause = "running"
    else:
        if release is not None:
            reason = _release_reason(release, diag)
            cause = _RELEASE_FAILURE_CAUSE.get(reason)
            end_cause = cause or reason
        else:
            cause = end_cause = "lost"
        if cause is not None:
            # A silent trainer's interruption happened at its last news; an uninstrumented
            # attempt has no better instant than its end.
            failure_us = trainer_last if silent_tail and trainer_last is not None else end
    if failure_us is not None:
        failure_us = min(max(failure_us, start), end)

    gpus = _gpus(allocation, trainer_frame) or previous_gpus
    if gpus is None:
        gpus = DEFAULT_GPUS
        diag.gpus_defaulted_attempts.append(k)

    timeline_events = sorted(
        (*trainer, *(e for e in scheduler if e.type in ("phase_start", "phase_end", "failure"))),
        key=sort_key)
    inside = []
    for event in timeline_events:
        if event.ts_us > end:
            diag.add("events_after_end")
        else:
            inside.append(event)
    frame = AttemptFrame(
        attempt=k,
        start_us=start,
        end_us=end,
        gpus=gpus,
        end_cause=end_cause,
        is_running=is_running,
        failure_us=failure_us,
        cause=cause,
        failure_event_id=failure.event_id if failure is not None else None,
        last_news_us=last_news,
        allocated=allocation is not None or bool(trainer_frame and trainer_frame.allocated),
        events=tuple(inside),
    )
    trainer_first = trainer[0].ts_us if trainer else None
    view = SchedulerView(
        attempt=k,
        allocated_us=allocation.ts_us if allocation is not None else None,
        released_us=release.ts_us if release is not None else None,
        queued_at_us=_queued_at(allocation),
        trainer_first_us=trainer_first,
        trainer_last_us=trainer_last,
        hardware_until_us=trainer_first,
        teardown_from_us=trainer_release.ts_us if trainer_release is not None else None,
        unreported_from_us=(trainer_last if silent_tail else None) if trainer else start,
    )
    return frame, view


def name_gaps(
    view: SchedulerView | None, frame: AttemptFrame, timeline: AttemptTimeline, taxonomy: Taxonomy
) -> AttemptTimeline:
    """Rename the partition's pieces inside the gaps only the scheduler sees."""
    if view is None:
        return timeline
    setup = (HARDWARE_SETUP, taxonomy.component_of(HARDWARE_SETUP) or "initialization")
    teardown = (TEARDOWN, taxonomy.component_of(TEARDOWN) or "shutdown")
    silent_from = view.unreported_from_us
    failure = frame.failure_us
    cuts = sorted({c for c in (view.hardware_until_us, view.teardown_from_us, silent_from, failure)
                   if c is not None})
    pieces: list[Piece] = []
    for start, end, phase, component in timeline.pieces:
        bounds = [start, *(c for c in cuts if start < c < end), end]
        for lo, hi in pairwise(bounds):
            if (silent_from is not None and lo >= silent_from
                    and (view.instrumented or phase == UNATTRIBUTED)):
                # A silent tail after F was lost like lost progress; otherwise (and always
                # for an uninstrumented attempt) the GPUs were held and nobody said for what.
                interrupted_after = view.instrumented and failure is not None and lo >= failure
                named = (UNREPORTED, WASTED if interrupted_after else UNATTRIBUTED)
            elif view.teardown_from_us is not None and lo >= view.teardown_from_us:
                named = teardown
            elif (view.hardware_until_us is not None and hi <= view.hardware_until_us
                  and phase == UNATTRIBUTED):
                named = setup
            else:
                named = (phase, component)
            if pieces and pieces[-1][1] == lo and pieces[-1][2:] == named:
                pieces[-1] = (pieces[-1][0], hi, *named)
            else:
                pieces.append((lo, hi, *named))
    training = [p for p in pieces if p[3] == EFFECTIVE]
    return AttemptTimeline(
        pieces=tuple(pieces),
        checkpoints=timeline.checkpoints,
        first_training_us=training[0][0] if training else None,
        last_training_end_us=training[-1][1] if training else None,
    )


def own_unreported(
    view: SchedulerView | None,
    frame: AttemptFrame,
    pieces: list[Labelled],
    taxonomy: Taxonomy,
    model_team: str,
) -> list[Labelled]:
    """An interrupted silent tail is owned like lost progress: by the interruption's cause."""
    if view is None or view.unreported_from_us is None or frame.cause is None:
        return pieces
    owner = taxonomy.lost_progress_owner_of(frame.cause, model_team)
    return [
        (s, e, c, p, owner if p == UNREPORTED and c == WASTED else o, settled)
        for s, e, c, p, o, settled in pieces
    ]


def mapping_conflicts(events: Sequence[Event], model: str, team: str) -> tuple[str, ...]:
    """The scheduler's model/team names that differ from the job's (the trainer's word)."""
    seen: set[str] = set()
    for event in events:
        if not is_scheduler(event):
            continue
        if event.model != model:
            seen.add(f"scheduler model {event.model!r} (job: {model!r})")
        if isinstance(event.team, str) and event.team and event.team != team:
            seen.add(f"scheduler team {event.team!r} (job: {team!r})")
    return tuple(sorted(seen))
