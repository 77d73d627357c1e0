"""JobResult: one job's figures in microseconds, and its docs/model.md section 7 wire form."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ett_core.diagnostics import Diagnostics
from ett_core.instants import format_rfc3339_us, us_to_seconds
from ett_core.level1 import TERMS, Level1
from ett_core.scheduler import SchedulerView
from ett_core.stalls import AttemptStalls
from ett_core.taxonomy import COMPONENTS


@dataclass(frozen=True, slots=True)
class AttemptResult:
    attempt: int
    allocated_at_us: int  # the allocation, or the first event when `allocated` is missing
    released_at_us: int | None  # the release or the inferred end; None while open
    gpus: int
    end_cause: str
    held_us: int
    startup_us: int
    failure_at_us: int | None  # the interruption instant F, when there is one
    at_risk_us: int
    # Set when the scheduler reported the attempt (ett_core.scheduler).
    scheduler: SchedulerView | None = None

    @property
    def queue_us(self) -> int:
        return self.scheduler.queue_us if self.scheduler is not None else 0

    @property
    def instrumented(self) -> bool:
        return self.scheduler is None or self.scheduler.instrumented

    def to_wire(self) -> dict[str, Any]:
        view = self.scheduler
        return {
            "attempt": self.attempt,
            "allocated_at": format_rfc3339_us(self.allocated_at_us),
            "released_at": None
            if self.released_at_us is None
            else format_rfc3339_us(self.released_at_us),
            "gpus": self.gpus,
            "end_cause": self.end_cause,
            "held_seconds": us_to_seconds(self.held_us),
            "startup_seconds": us_to_seconds(self.startup_us),
            "held_by": "trainer" if view is None else "scheduler",
            "instrumented": self.instrumented,
            "queued_at": None if view is None or view.queued_at_us is None
            else format_rfc3339_us(view.queued_at_us),
            "queue_seconds": us_to_seconds(self.queue_us),
            "trainer_first_at": None if view is None or view.trainer_first_us is None
            else format_rfc3339_us(view.trainer_first_us),
            "trainer_last_at": None if view is None or view.trainer_last_us is None
            else format_rfc3339_us(view.trainer_last_us),
        }


@dataclass(frozen=True, slots=True)
class JobResult:
    """docs/model.md section 7 fields in plain (not GPU-weighted) microseconds."""

    job_id: str
    model: str
    team: str
    state: str
    attempts: tuple[AttemptResult, ...]
    held_us: int
    effective_us: int
    at_risk_us: int
    components: Mapping[str, int]  # all seven, sums to held_us
    phases: Mapping[str, int]  # phases that own time, sums to held_us
    owners: Mapping[str, int]  # owners that own time, sums to held_us
    level1: Level1
    diagnostics: Diagnostics
    # Attempts' progress by steps (ett_core.stalls); empty for a job without steps.
    stalls: tuple[AttemptStalls, ...] = ()
    # Queue time of the scheduler-reported attempts: beside held time, never inside it.
    queue_us: int = 0

    @property
    def stalled_since_us(self) -> int | None:
        """Start of the stall going on now (the last attempt open and stalled), else None."""
        return self.stalls[-1].stalled_since_us if self.stalls else None

    @property
    def uninstrumented_held_us(self) -> int:
        return sum(a.held_us for a in self.attempts if not a.instrumented)

    @property
    def ett_ratio(self) -> float | None:
        return self.effective_us / self.held_us if self.held_us else None

    def to_wire(self) -> dict[str, Any]:
        """The `GET /v1/jobs/{job_id}` document, plus `diagnostics` and `level1.breakdown`."""
        level1 = self.level1
        mean_ttr = level1.mean_ttr_us
        return {
            "job_id": self.job_id,
            "model": self.model,
            "team": self.team,
            "state": self.state,
            "attempts": [a.to_wire() for a in self.attempts],
            "held_seconds": us_to_seconds(self.held_us),
            "effective_seconds": us_to_seconds(self.effective_us),
            "at_risk_seconds": us_to_seconds(self.at_risk_us),
            "ett_ratio": self.ett_ratio,
            "queue_seconds": us_to_seconds(self.queue_us),
            "unreported_seconds": us_to_seconds(self.phases.get("unreported", 0)),
            "unreported_ratio": self.phases.get("unreported", 0) / self.held_us
            if self.held_us else None,
            "uninstrumented_held_seconds": us_to_seconds(self.uninstrumented_held_us),
            "components": {c: us_to_seconds(self.components.get(c, 0)) for c in COMPONENTS},
            "phases": {p: us_to_seconds(v) for p, v in sorted(self.phases.items())},
            "owners": {o: us_to_seconds(v) for o, v in sorted(self.owners.items())},
            "level1": {
                "tts_seconds": us_to_seconds(level1.tts_us),
                "nof": level1.nof,
                "nof_by_cause": level1.nof_by_cause,
                "ttr_seconds": [us_to_seconds(t) for t in level1.ttr_us],
                "mean_ttr_seconds": None if mean_ttr is None else us_to_seconds(mean_ttr),
                "in_loop_overhead_seconds": us_to_seconds(level1.in_loop_overhead_us),
                "final_shutdown_seconds": us_to_seconds(level1.final_shutdown_us),
                "breakdown": {
                    term: {c: us_to_seconds(level1.breakdown[term][c]) for c in COMPONENTS}
                    for term in TERMS
                },
            },
            "diagnostics": self.diagnostics.to_wire(),
            # Attempts that reported steps: their advances, threshold and any stall now.
            "progress": [a.to_wire() for a in self.stalls if a.advances],
        }
