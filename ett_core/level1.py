"""Level 1 (docs/model.md section 3): TTS, TTR per interruption, in-loop overhead, final shutdown.

Every labelled instant of every attempt goes to exactly one term, so
held = effective + TTS + sum(TTR) + in_loop + final_shutdown holds to the microsecond,
for finished jobs, running ones, and ones that never reach training.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from types import MappingProxyType

from ett_core.attempts import AttemptFrame
from ett_core.progress import Labelled
from ett_core.taxonomy import CAUSES, COMPONENTS, EFFECTIVE, LOST_PROGRESS
from ett_core.timeline import AttemptTimeline

TERMS = ("effective", "tts", "ttr", "in_loop_overhead", "final_shutdown")
_NEVER = float("inf")


def _zeros() -> dict[str, int]:
    return dict.fromkeys(COMPONENTS, 0)


@dataclass(slots=True)
class AttemptTerms:
    """One attempt's held time split by Level-1 role, each by component."""

    startup: dict[str, int] = field(default_factory=_zeros)
    own_recovery: dict[str, int] = field(default_factory=_zeros)  # lost progress + after F
    effective: dict[str, int] = field(default_factory=_zeros)
    in_loop: dict[str, int] = field(default_factory=_zeros)
    final_shutdown: dict[str, int] = field(default_factory=_zeros)

    @property
    def startup_us(self) -> int:
        return sum(self.startup.values())


def attempt_terms(
    frame: AttemptFrame, timeline: AttemptTimeline, pieces: Sequence[Labelled]
) -> AttemptTerms:
    terms = AttemptTerms()
    first_training = timeline.first_training_us
    failure = frame.failure_us
    # Startup ends at the first training instant, or at the failure when the attempt
    # fails before training: what follows a failure is recovery, never startup.
    startup_end = min(
        first_training if first_training is not None else _NEVER,
        failure if failure is not None else _NEVER,
    )
    # Final shutdown exists only for an attempt that ended without an interruption.
    last_training = timeline.last_training_end_us if frame.completed_normally else None
    cuts = sorted(
        {c for c in (startup_end, failure, last_training) if c is not None and c != _NEVER}
    )
    for start, end, component, phase, _owner, _settled in pieces:
        inner = [c for c in cuts if start < c < end]
        bounds = [start, *inner, end]
        for lo, hi in pairwise(bounds):
            if lo < startup_end:
                bucket = terms.startup
            elif (failure is not None and lo >= failure) or phase == LOST_PROGRESS:
                bucket = terms.own_recovery
            elif component == EFFECTIVE:
                bucket = terms.effective
            elif last_training is not None and lo >= last_training:
                bucket = terms.final_shutdown
            else:
                bucket = terms.in_loop
            bucket[component] += hi - lo
    return terms


@dataclass(frozen=True, slots=True)
class Level1:
    effective_us: int
    tts_us: int
    ttr_us: tuple[int, ...]
    ttr_causes: tuple[str, ...]
    ttr_attempts: tuple[int, ...]  # the attempt each interruption ended
    in_loop_overhead_us: int
    final_shutdown_us: int
    breakdown: Mapping[str, Mapping[str, int]]  # term -> component -> microseconds
    # The same in GPU-microseconds: each attempt's time weighted by its own GPU count (a
    # recovery's lost progress at the failed attempt's, its restart at the next one's).
    # Cohorts (impact, what-if) add these over jobs.
    gpu_breakdown: Mapping[str, Mapping[str, int]]

    @property
    def nof(self) -> int:
        return len(self.ttr_us)

    @property
    def nof_by_cause(self) -> dict[str, int]:
        counts = dict.fromkeys(CAUSES, 0)
        for cause in self.ttr_causes:
            counts[cause] += 1
        return counts

    @property
    def mean_ttr_us(self) -> float | None:
        return sum(self.ttr_us) / len(self.ttr_us) if self.ttr_us else None

    @property
    def total_us(self) -> int:
        return (
            self.effective_us
            + self.tts_us
            + sum(self.ttr_us)
            + self.in_loop_overhead_us
            + self.final_shutdown_us
        )


def _add(into: dict[str, int], more: Mapping[str, int], weight: int = 1) -> None:
    for component, amount in more.items():
        into[component] += amount * weight


def _frozen(breakdown: dict[str, dict[str, int]]) -> Mapping[str, Mapping[str, int]]:
    return MappingProxyType({t: MappingProxyType(c) for t, c in breakdown.items()})


def combine(frames: Sequence[AttemptFrame], terms: Sequence[AttemptTerms]) -> Level1:
    """Chain attempts: each interruption's TTR takes the next attempt's startup."""
    breakdown = {term: _zeros() for term in TERMS}
    gpu = {term: _zeros() for term in TERMS}
    recoveries: list[tuple[int, str, dict[str, int]]] = []
    pending: tuple[int, str, dict[str, int]] | None = None
    for frame, own in zip(frames, terms, strict=True):
        g = frame.gpus
        if pending is not None:
            _add(pending[2], own.startup)
            _add(gpu["ttr"], own.startup, g)
            recoveries.append(pending)
            pending = None
        else:
            # The first start, or a restart after a clean end (a resubmitted job): a start
            # that no interruption caused is time to start, not time to recover.
            _add(breakdown["tts"], own.startup)
            _add(gpu["tts"], own.startup, g)
        for term, part in (("effective", own.effective), ("in_loop_overhead", own.in_loop),
                           ("final_shutdown", own.final_shutdown)):
            _add(breakdown[term], part)
            _add(gpu[term], part, g)
        if frame.interrupted:
            pending = (frame.attempt, frame.cause or "lost", dict(own.own_recovery))
            _add(gpu["ttr"], own.own_recovery, g)
    if pending is not None:
        recoveries.append(pending)
    for _attempt, _cause, by_component in recoveries:
        _add(breakdown["ttr"], by_component)
    return Level1(
        effective_us=sum(breakdown["effective"].values()),
        tts_us=sum(breakdown["tts"].values()),
        ttr_us=tuple(sum(r[2].values()) for r in recoveries),
        ttr_causes=tuple(r[1] for r in recoveries),
        ttr_attempts=tuple(r[0] for r in recoveries),
        in_loop_overhead_us=sum(breakdown["in_loop_overhead"].values()),
        final_shutdown_us=sum(breakdown["final_shutdown"].values()),
        breakdown=_frozen(breakdown),
        gpu_breakdown=_frozen(gpu),
    )
