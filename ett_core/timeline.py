"""The innermost-open-phase partition of one attempt's held time (docs/model.md section 2).

At every instant the phase started most recently among those still open owns the time;
background phases are recorded but own nothing; held time no phase covers is
`unattributed`. The result tiles [start, end) of the attempt exactly, so conservation
holds by construction.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ett_core.attempts import AttemptFrame
from ett_core.diagnostics import DiagnosticsBuilder
from ett_core.instants import parse_instant_us
from ett_core.taxonomy import CHECKPOINT_SAVE, EFFECTIVE, UNATTRIBUTED, Taxonomy

# (start_us, end_us, phase, component): tuples, because a 10,000-event job makes
# thousands of them and the core has a latency budget.
Piece = tuple[int, int, str, str]

_UNCOVERED = (UNATTRIBUTED, UNATTRIBUTED)
# The event types that can change who owns the time, or record a checkpoint.
_CUTTING = frozenset({"phase_start", "phase_end", "failure", "checkpoint"})


@dataclass(frozen=True, slots=True)
class Checkpoint:
    durable_us: int
    snapshot_us: int


@dataclass(frozen=True, slots=True)
class AttemptTimeline:
    pieces: tuple[Piece, ...]
    checkpoints: tuple[Checkpoint, ...]
    first_training_us: int | None
    last_training_end_us: int | None
    # The phases still open at the end, innermost last (ett_core.resume starts from them).
    open_at_end: tuple[OpenPhase, ...] = ()


@dataclass(frozen=True, slots=True)
class OpenPhase:
    phase: str
    start_us: int
    background: bool
    component: str


def innermost(stack: Sequence[OpenPhase]) -> tuple[str, str]:
    """The (phase, component) that owns the time while `stack` is open."""
    for entry in reversed(stack):
        if not entry.background:
            return entry.phase, entry.component
    return _UNCOVERED


def _snapshot_us(
    attrs: object, stack: list[OpenPhase], durable_us: int, diag: DiagnosticsBuilder
) -> int:
    raw = attrs.get("snapshot_ts") if isinstance(attrs, Mapping) else None
    if raw is not None:
        snapshot = parse_instant_us(raw)
        if snapshot is not None and snapshot <= durable_us:
            return snapshot
        # Unreadable, or claims state from after it became durable: fall back, counted.
        diag.add("snapshot_ts_unusable")
    for entry in reversed(stack):
        if entry.phase == CHECKPOINT_SAVE:
            return entry.start_us
    return durable_us


def partition(frame: AttemptFrame, taxonomy: Taxonomy, diag: DiagnosticsBuilder,
              opened: tuple[OpenPhase, ...] = ()) -> AttemptTimeline:
    """`opened`: the phases open at the frame's start (a resumed computation's frame starts
    inside the attempt, ett_core.resume)."""
    start, end = frame.start_us, frame.end_us
    stack: list[OpenPhase] = list(opened)
    closed_by_failure: Counter[str] = Counter()
    pieces: list[Piece] = []
    checkpoints: list[Checkpoint] = []
    cursor = start
    owner = innermost(stack)
    component_of = dict(taxonomy.phase_component).get  # a plain dict: this loop is hot
    for event in frame.events:
        kind = event.type
        # Any other type (heartbeats are most of a job's events) changes no owner: a cut at
        # it would only lengthen the piece in progress, which the next cut does anyway.
        if kind not in _CUTTING:
            continue
        ts = min(max(event.ts_us, start), end)
        if ts > cursor:
            if pieces and pieces[-1][1] == cursor and pieces[-1][2:] == owner:
                pieces[-1] = (pieces[-1][0], ts, *owner)
            else:
                pieces.append((cursor, ts, *owner))
            cursor = ts
        if kind == "phase_start":
            phase = event.phase
            component = component_of(phase)
            if component is None:
                diag.unknown_phase(phase)
                component = UNATTRIBUTED
            background = event.attrs.get("background") is True
            stack.append(OpenPhase(phase, ts, background, component))
            if not background:
                owner = (phase, component)
        elif kind == "phase_end":
            phase = event.phase
            if component_of(phase) is None:
                diag.unknown_phase(phase)
            # Match the most recent open phase of that name: with repeated names, the
            # innermost one is the one a well-nested reporter is closing.
            for index in range(len(stack) - 1, -1, -1):
                if stack[index].phase == phase:
                    del stack[index]
                    owner = innermost(stack)
                    break
            else:
                if closed_by_failure[phase] > 0:
                    closed_by_failure[phase] -= 1
                    diag.add("late_phase_ends")
                else:
                    diag.add("unmatched_phase_ends")
        elif kind == "failure":
            if event.event_id == frame.failure_event_id:
                # The failure ends the attempt's work: whatever is open stops here.
                closed_by_failure.update(entry.phase for entry in stack)
                stack.clear()
                owner = _UNCOVERED
        elif kind == "checkpoint":
            checkpoints.append(Checkpoint(ts, _snapshot_us(event.attrs, stack, ts, diag)))
    if end > cursor:
        if pieces and pieces[-1][1] == cursor and pieces[-1][2:] == owner:
            pieces[-1] = (pieces[-1][0], end, *owner)
        else:
            pieces.append((cursor, end, *owner))
    training = [p for p in pieces if p[3] == EFFECTIVE]
    return AttemptTimeline(
        pieces=tuple(pieces),
        checkpoints=tuple(checkpoints),
        first_training_us=training[0][0] if training else None,
        last_training_end_us=training[-1][1] if training else None,
        open_at_end=tuple(stack),
    )
