"""What each Slurm job state becomes (docs/slurm.md, "What each Slurm state becomes").

A run that ended names a release reason; some also name a failure with its cause, which
outranks the trainer's own release (docs/model.md, "End cause").
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Outcome:
    reason: str  # released: completed, failed, preempted, cancelled
    cause: str | None  # a failure event's cause (infra, user, preemption), or none


# Only the first word counts: sacct says "CANCELLED by 0".
_ENDED = {
    "COMPLETED": Outcome("completed", None),
    "CANCELLED": Outcome("cancelled", None),
    # A non-zero exit: the trainer's own failure event says why; without one the release
    # counts as an infra failure (docs/model.md section 5).
    "FAILED": Outcome("failed", None),
    "TIMEOUT": Outcome("failed", "infra"),
    "DEADLINE": Outcome("failed", "infra"),
    "NODE_FAIL": Outcome("failed", "infra"),
    "BOOT_FAIL": Outcome("failed", "infra"),
    "OUT_OF_MEMORY": Outcome("failed", "user"),
    "PREEMPTED": Outcome("preempted", "preemption"),
    # Requeued by an operator, a preemption or a node failure: the run was taken away.
    "REQUEUED": Outcome("preempted", "preemption"),
}


def outcome(state: str) -> Outcome | None:
    """The outcome of an ended run, or None while the run has not ended (RUNNING, ...)."""
    word = state.split(" ", 1)[0].strip().upper().rstrip("+")
    return _ENDED.get(word)
