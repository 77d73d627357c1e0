"""Diagnostics: what the core ignored, defaulted or inferred, counted, never silent.

Telemetry that quietly drops bad input hides exactly the problems its users need to fix
(a trainer that never sends `released`, a phase name typo), so every such case is counted
and reported with the job.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Any


@dataclass(frozen=True, slots=True)
class Diagnostics:
    duplicates_dropped: int = 0
    invalid_events: int = 0
    foreign_job_events: int = 0
    non_timeline_events: int = 0
    unknown_phase_events: int = 0
    unknown_phase_names: tuple[str, ...] = ()
    unmatched_phase_ends: int = 0
    late_phase_ends: int = 0
    events_before_allocation: int = 0
    events_after_end: int = 0
    extra_allocated: int = 0
    extra_released: int = 0
    extra_failures: int = 0
    failure_cause_defaulted: int = 0
    release_reason_defaulted: int = 0
    snapshot_ts_unusable: int = 0
    checkpoints_after_failure: int = 0
    gpus_defaulted_attempts: tuple[int, ...] = ()
    inferred_end_attempts: tuple[int, ...] = ()
    # Steps (ett_core.stalls): attempts with steps but too few advances for stall
    # detection, and interrupted attempts whose snapshot was inferred from the next
    # attempt's first step.
    few_advances_attempts: tuple[int, ...] = ()
    snapshot_from_steps: tuple[int, ...] = ()
    # The scheduler's word (ett_core.scheduler): an allocation whose release never came,
    # and the scheduler's model/team names that differ from the trainer's.
    scheduler_release_missing: int = 0
    mapping_conflicts: tuple[str, ...] = ()

    def to_wire(self) -> dict[str, Any]:
        out = {}
        for name in _NAMES:
            value = getattr(self, name)
            out[name] = list(value) if type(value) is tuple else value
        return out


_NAMES = tuple(f.name for f in fields(Diagnostics))
_COUNTERS = frozenset(f.name for f in fields(Diagnostics) if f.type in ("int", int))


@dataclass
class DiagnosticsBuilder:
    """Mutable collector used while one job is computed."""

    counts: Counter[str] = field(default_factory=Counter)
    unknown_phase_names: set[str] = field(default_factory=set)
    gpus_defaulted_attempts: list[int] = field(default_factory=list)
    inferred_end_attempts: list[int] = field(default_factory=list)
    few_advances_attempts: list[int] = field(default_factory=list)
    snapshot_from_steps: list[int] = field(default_factory=list)
    mapping_conflicts: tuple[str, ...] = ()

    def add(self, counter: str, amount: int = 1) -> None:
        if counter not in _COUNTERS:
            raise KeyError(counter)  # a typo here would be a silently missing counter
        self.counts[counter] += amount

    def unknown_phase(self, name: str) -> None:
        self.counts["unknown_phase_events"] += 1
        self.unknown_phase_names.add(name)

    def freeze(self) -> Diagnostics:
        return Diagnostics(
            **dict(self.counts),
            unknown_phase_names=tuple(sorted(self.unknown_phase_names)),
            gpus_defaulted_attempts=tuple(sorted(self.gpus_defaulted_attempts)),
            inferred_end_attempts=tuple(sorted(self.inferred_end_attempts)),
            few_advances_attempts=tuple(sorted(self.few_advances_attempts)),
            snapshot_from_steps=tuple(sorted(self.snapshot_from_steps)),
            mapping_conflicts=self.mapping_conflicts,
        )
