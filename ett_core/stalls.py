"""Progress and stalls (docs/model.md section 14): steps into stalled time and snapshots.

Progress is the optimizer step (`attrs.step`) on the attempt's timeline events. A gap
between step advances much longer than the attempt's usual interval is a stall: the GPUs
were held and nothing advanced, so the time is not effective training. Steps also stand
in for a checkpoint the trainer did not report: the next attempt's first step shows which
state survived the interruption.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import Any

from ett_core.attempts import AttemptFrame
from ett_core.diagnostics import DiagnosticsBuilder
from ett_core.events import NO_ATTRS
from ett_core.instants import format_rfc3339_us, us_to_seconds
from ett_core.progress import Labelled, Progress
from ett_core.taxonomy import EFFECTIVE, LOST_PROGRESS, STALLED, WASTED, Taxonomy

# Fewer advances than this give no usable median: the attempt gets no stall detection.
MIN_ADVANCES = 10
STEP_ATTR = "step"
# The wire bound on a step (service.wire): larger numbers are not steps.
MAX_STEP = 2**53


@dataclass(frozen=True, slots=True)
class AttemptStalls:
    """One attempt's progress, as far as steps tell it."""

    attempt: int
    advances: int
    last_step: int | None
    last_advance_us: int | None
    # None: fewer than MIN_ADVANCES advances, no detection.
    median_interval_us: int | None
    threshold_us: int | None
    # The stalled windows [start, end), before reported phases took their share.
    windows: tuple[tuple[int, int], ...]
    # Start of the stall still going at the end of a running attempt, else None.
    stalled_since_us: int | None

    def to_wire(self) -> dict[str, Any]:
        def seconds(value: int | None) -> float | None:
            return None if value is None else us_to_seconds(value)

        return {
            "attempt": self.attempt,
            "advances": self.advances,
            "last_step": self.last_step,
            "last_advance_at": None
            if self.last_advance_us is None
            else format_rfc3339_us(self.last_advance_us),
            "median_interval_seconds": seconds(self.median_interval_us),
            "threshold_seconds": seconds(self.threshold_us),
            "stalled_since": None
            if self.stalled_since_us is None
            else format_rfc3339_us(self.stalled_since_us),
        }


def advances_of(frame: AttemptFrame, best: int = -1) -> list[tuple[int, int]]:
    """(instant, step) of each event whose step is above every earlier step of the attempt.

    The first step an attempt reports is always its first advance. One pass, inlined: it
    runs over every timeline event of a 10,000-event job (attrs are a mapping or the
    shared empty one after the core's cleaning). `best`: the step reached before the
    frame's first event (a resumed computation, ett_core.resume).
    """
    out: list[tuple[int, int]] = []
    start = frame.start_us
    for event in frame.events:
        attrs = event.attrs
        if attrs is NO_ATTRS:
            continue
        step = attrs.get(STEP_ATTR)
        if type(step) is int and best < step <= MAX_STEP:
            best = step
            ts = event.ts_us
            out.append((ts if ts > start else start, step))
    return out


def _median(values: Sequence[int]) -> int:
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) // 2  # whole microseconds, rounded down


def attempt_stalls(
    frame: AttemptFrame,
    advances: Sequence[tuple[int, int]],
    taxonomy: Taxonomy,
    diag: DiagnosticsBuilder,
) -> AttemptStalls:
    last = advances[-1] if advances else None
    none = AttemptStalls(
        frame.attempt,
        len(advances),
        last[1] if last else None,
        last[0] if last else None,
        None,
        None,
        (),
        None,
    )
    if len(advances) < MIN_ADVANCES:
        if advances:
            diag.few_advances_attempts.append(frame.attempt)
        return none
    instants = [ts for ts, _ in advances]
    median = _median([b - a for a, b in pairwise(instants)])
    threshold = max(taxonomy.stall_floor_us, int(taxonomy.stall_factor * median))
    # The last gap runs to the end of the attempt's training phase (`now` while it is
    # open, even when a save nested in it owns the time: a deadlocked save is a stall in
    # progress). An attempt that ended in silence (lost, or ended by the next one's start)
    # stalled at most until its last news: after it the trainer was gone, not hung, and
    # lost progress covers that time.
    training_end = _training_phase_end(frame, taxonomy)
    # A hung trainer keeps sending (its heartbeat thread runs); one silent for longer than
    # the threshold is not known to be hung (a collector or SDK outage looks the same), so
    # a running attempt's stall also stops at its last news until the trainer speaks again.
    if training_end is not None and (
        not frame.is_running or training_end - frame.last_news_us > threshold
    ):
        training_end = min(training_end, frame.last_news_us)
    ends = instants[1:]
    if training_end is not None and training_end > instants[-1]:
        ends.append(training_end)
    windows = []
    since = None
    for start, end in zip(instants, ends, strict=False):
        if end - start > threshold:
            windows.append((start + median, end))
    if (
        windows
        and frame.is_running
        and training_end == frame.end_us
        and windows[-1][1] == training_end
    ):
        since = windows[-1][0]
    return replace(
        none, median_interval_us=median, threshold_us=threshold, windows=tuple(windows),
        stalled_since_us=since,
    )


def _training_phase_end(frame: AttemptFrame, taxonomy: Taxonomy) -> int | None:
    """When the attempt's training phases (component effective_training) last closed, the
    attempt's end while one is still open, None when none ever opened."""
    open_phases, end = training_scan(frame, taxonomy, {}, None)
    return frame.end_us if any(open_phases.values()) else end


def training_scan(frame: AttemptFrame, taxonomy: Taxonomy, open_phases: dict[str, int],
                  end: int | None) -> tuple[dict[str, int], int | None]:
    """The open training phases (name -> count) and their last close after the frame's
    events, from those before them (`open_phases` is updated in place)."""
    component_of = taxonomy.phase_component.get
    for event in frame.events:
        kind, phase = event.type, event.phase
        if kind == "phase_start" and component_of(phase) == EFFECTIVE:  # type: ignore[arg-type]
            if event.attrs.get("background") is not True:
                open_phases[phase] = open_phases.get(phase, 0) + 1  # type: ignore[index]
        elif kind == "phase_end" and open_phases.get(phase, 0) > 0:  # type: ignore[arg-type]
            open_phases[phase] -= 1  # type: ignore[index]
            if not any(open_phases.values()):
                end = min(max(event.ts_us, frame.start_us), frame.end_us)
        elif kind == "failure" and event.event_id == frame.failure_event_id:
            if any(open_phases.values()):
                end = min(max(event.ts_us, frame.start_us), frame.end_us)
            open_phases.clear()
    return open_phases, end


def mark_stalled(
    frame: AttemptFrame,
    pieces: Sequence[Labelled],
    stalls: AttemptStalls,
    owner: str,
) -> list[Labelled]:
    """Relabel training inside the stall windows as `stalled`; other phases keep their time.

    Training that would be lost progress is stalled too: nothing advanced then, so there
    was no progress to lose. Stalled time is settled (an advance that comes later cannot
    undo a stall already longer than its threshold), except after the last news of a
    running attempt, like every other piece.
    """
    if not stalls.windows:
        return list(pieces)
    windows = stalls.windows
    unsettled_from = frame.last_news_us if frame.is_running else None
    out: list[Labelled] = []
    for piece in pieces:
        start, end, component, phase = piece[0], piece[1], piece[2], piece[3]
        if component != EFFECTIVE and phase != LOST_PROGRESS:
            out.append(piece)
            continue
        cursor = start
        for lo, hi in windows:
            lo, hi = max(lo, start), min(hi, end)
            if lo >= hi:
                continue
            if lo > cursor:
                out.append((cursor, lo, *piece[2:]))
            for a, b, settled in _settled_parts(lo, hi, unsettled_from):
                out.append((a, b, WASTED, STALLED, owner, settled))
            cursor = hi
        if cursor < end:
            out.append((cursor, end, *piece[2:]))
    return out


def _settled_parts(
    start: int, end: int, unsettled_from: int | None
) -> list[tuple[int, int, bool]]:
    if unsettled_from is None or unsettled_from >= end:
        return [(start, end, True)]
    if unsettled_from <= start:
        return [(start, end, False)]
    return [(start, unsettled_from, True), (unsettled_from, end, False)]


def snapshot_from_steps(
    frame: AttemptFrame,
    progress: Progress,
    advances: Sequence[tuple[int, int]],
    next_first_step: int | None,
    diag: DiagnosticsBuilder,
) -> Progress:
    """An interrupted attempt without a durable checkpoint: the next attempt's first step s
    shows the state at s was saved, so S is the instant this attempt first reached s."""
    if progress.snapshot_us is not None or progress.lost_from_us is None:
        return progress  # a reported checkpoint wins; no lost progress to re-cut otherwise
    if next_first_step is None or next_first_step <= 0:
        return progress
    limit = frame.failure_us if frame.failure_us is not None else frame.end_us
    for ts, step in advances:
        if ts > limit:
            break
        if step >= next_first_step:
            diag.snapshot_from_steps.append(frame.attempt)
            return Progress(ts, ts, None)
    return progress
