"""Per-attempt checkpoint facts: what checkpoint advice needs from each attempt.

The advice (ett_core.checkpoint_advice) is fitted over many attempts of a model, so the
core keeps, for every attempt, the few sums that can be added up across jobs later:
held time, whether it was interrupted, blocking save time, durable checkpoints, the
training between consecutive durable snapshots, lost progress and the recovery time of
its interruption. Everything is read from the partition and labels the core already
built, so the facts agree with the attempt's components to the microsecond.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from ett_core.attempts import AttemptFrame
from ett_core.progress import Labelled
from ett_core.taxonomy import CHECKPOINT_SAVE, EFFECTIVE, LOST_PROGRESS
from ett_core.timeline import AttemptTimeline, Piece


@dataclass(frozen=True, slots=True)
class AttemptCheckpoints:
    attempt: int
    start_us: int
    gpus: int
    held_us: int
    interrupted: bool
    # Time the checkpoint_save phase owned: the part of a save that blocked training (an
    # asynchronous save reports only its staging as checkpoint_save).
    blocking_save_us: int
    # Checkpoints made durable in the attempt (before its failure, when it has one).
    durable_checkpoints: int
    # Training microseconds between consecutive durable snapshots, in snapshot order.
    intervals_us: tuple[int, ...]
    lost_progress_us: int
    # Time to recover from this attempt's interruption (None: not interrupted).
    ttr_us: int | None


def _training_before(training: Sequence[Piece], instants: Sequence[int]) -> list[int]:
    """Training microseconds before each of `instants` (ascending), one sweep."""
    out: list[int] = []
    done = 0  # training of pieces wholly before the current instant
    index = 0
    for instant in instants:
        while index < len(training) and training[index][1] <= instant:
            done += training[index][1] - training[index][0]
            index += 1
        partial = 0
        if index < len(training) and training[index][0] < instant:
            partial = instant - training[index][0]
        out.append(done + partial)
    return out


def attempt_checkpoints(
    frame: AttemptFrame,
    timeline: AttemptTimeline,
    pieces: Sequence[Labelled],
    ttr_by_attempt: Mapping[int, int],
) -> AttemptCheckpoints:
    durable = timeline.checkpoints
    if frame.failure_us is not None:
        # The same rule as lost progress: a checkpoint durable after F saved nothing.
        durable = tuple(c for c in durable if c.durable_us <= frame.failure_us)
    snapshots = sorted({c.snapshot_us for c in durable})
    # Training as the partition reported it, before lost progress was relabelled: an
    # interval is how long the job trained between snapshots, whatever became of it.
    training = [p for p in timeline.pieces if p[3] == EFFECTIVE]
    before = _training_before(training, snapshots)
    intervals = tuple(b - a for a, b in pairwise(before) if b > a)
    return AttemptCheckpoints(
        attempt=frame.attempt,
        start_us=frame.start_us,
        gpus=frame.gpus,
        held_us=frame.held_us,
        interrupted=frame.interrupted,
        blocking_save_us=sum(p[1] - p[0] for p in timeline.pieces if p[2] == CHECKPOINT_SAVE),
        durable_checkpoints=len(durable),
        intervals_us=intervals,
        lost_progress_us=sum(p[1] - p[0] for p in pieces if p[3] == LOST_PROGRESS),
        ttr_us=ttr_by_attempt.get(frame.attempt) if frame.interrupted else None,
    )
