"""Impact (docs/impact.md): what a change gained, who gets the credit, what the next is worth.

A cohort is a set of whole, ended jobs summed: GPU-microseconds per Level-1 overhead term
and component, effective and held GPU-microseconds, and the plain TTS/TTR sums behind the
mean TTS and TTR. Savings are computed with exact fractions and rendered as floats at the
end, so `sum(savings) = E_C * (1/ETT_B - 1/ETT_C)` holds to the float's last digit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Any

from ett_core.events import Event
from ett_core.instants import US_PER_SECOND
from ett_core.result import JobResult
from ett_core.taxonomy import COMPONENTS, EFFECTIVE

OVERHEAD_TERMS = ("tts", "ttr", "in_loop_overhead", "final_shutdown")
# Restarts repeat these: the part of a recovery that a startup fix also shortens.
STARTUP_COMPONENTS = ("scheduling", "initialization", "compilation")
# What a what-if may shrink: every component but useful training.
SHRINKABLE = tuple(c for c in COMPONENTS if c != EFFECTIVE)


def _zero_terms() -> dict[str, dict[str, int]]:
    return {t: dict.fromkeys(COMPONENTS, 0) for t in OVERHEAD_TERMS}


@dataclass(frozen=True, slots=True)
class JobImpact:
    """One job's share of a cohort: what the aggregator stores per job."""

    job_id: str
    running: bool
    held_gpu_us: int
    effective_gpu_us: int
    nof: int
    tts_us: int  # plain microseconds (not GPU-weighted), for mean TTS
    ttr_us: int  # sum of the job's TTR_i, plain, for mean TTR
    overhead_gpu_us: Mapping[str, Mapping[str, int]]  # term -> component -> GPU-us


def job_impact(result: JobResult) -> JobImpact:
    level1 = result.level1
    gpu = level1.gpu_breakdown
    return JobImpact(
        job_id=result.job_id,
        running=result.state == "running",
        held_gpu_us=sum(a.held_us * a.gpus for a in result.attempts),
        effective_gpu_us=sum(gpu["effective"].values()),
        nof=level1.nof,
        tts_us=level1.tts_us,
        ttr_us=sum(level1.ttr_us),
        overhead_gpu_us=MappingProxyType(
            {t: MappingProxyType({c: gpu[t][c] for c in COMPONENTS}) for t in OVERHEAD_TERMS}),
    )


def union_labels(allocations: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """A job's labels from its allocations' `labels` objects, in attempt order: their union,
    a later attempt winning a key. Only string values count: events stored before labels
    were validated may hold anything."""
    out: dict[str, str] = {}
    for labels in allocations:
        out.update((k, v) for k, v in labels.items() if isinstance(v, str))
    return out


def job_labels(events: Iterable[Event]) -> dict[str, str]:
    """The labels of the job whose events (all of them) these are (`union_labels`)."""
    allocations = sorted(((e.attempt, e.ts_us, labels) for e in events
                          if e.type == "allocated"
                          and isinstance(labels := e.attrs.get("labels"), Mapping)),
                         key=lambda a: (a[0], a[1]))
    return union_labels(labels for _attempt, _ts, labels in allocations)


@dataclass(frozen=True, slots=True)
class Cohort:
    jobs: int = 0
    running_excluded: int = 0
    held_gpu_us: int = 0
    effective_gpu_us: int = 0
    nof: int = 0
    tts_us: int = 0
    ttr_us: int = 0
    overhead_gpu_us: Mapping[str, Mapping[str, int]] = field(default_factory=_zero_terms)

    @property
    def ett(self) -> Fraction | None:
        return Fraction(self.effective_gpu_us, self.held_gpu_us) if self.held_gpu_us else None

    @property
    def mean_tts_us(self) -> Fraction | None:
        return Fraction(self.tts_us, self.jobs) if self.jobs else None

    @property
    def mean_ttr_us(self) -> Fraction | None:
        return Fraction(self.ttr_us, self.nof) if self.nof else None


def cohort_of(jobs: Iterable[JobImpact]) -> Cohort:
    """Sum whole, ended jobs; running ones are only counted (their figures still move)."""
    n = running = held = effective = nof = tts = ttr = 0
    overhead = _zero_terms()
    for job in jobs:
        if job.running:
            running += 1
            continue
        n += 1
        held += job.held_gpu_us
        effective += job.effective_gpu_us
        nof += job.nof
        tts += job.tts_us
        ttr += job.ttr_us
        for t in OVERHEAD_TERMS:
            for c in COMPONENTS:
                overhead[t][c] += job.overhead_gpu_us[t][c]
    return Cohort(n, running, held, effective, nof, tts, ttr, overhead)


def _f(value: Fraction | None, scale: int = 1) -> float | None:
    return None if value is None else float(value / scale)


def cohort_wire(cohort: Cohort) -> dict[str, Any]:
    return {
        "jobs": cohort.jobs,
        "running_excluded": cohort.running_excluded,
        "held_gpu_seconds": cohort.held_gpu_us / US_PER_SECOND,
        "effective_gpu_seconds": cohort.effective_gpu_us / US_PER_SECOND,
        "ett_ratio": _f(cohort.ett),
        "nof": cohort.nof,
        "mean_tts_seconds": _f(cohort.mean_tts_us, US_PER_SECOND),
        "mean_ttr_seconds": _f(cohort.mean_ttr_us, US_PER_SECOND),
        "overhead_gpu_seconds": {
            t: {c: cohort.overhead_gpu_us[t][c] / US_PER_SECOND for c in COMPONENTS}
            for t in OVERHEAD_TERMS
        },
    }


def savings_us(baseline: Cohort, candidate: Cohort) -> dict[str, dict[str, Fraction]] | None:
    """`(O_B[t][c] / E_B - O_C[t][c] / E_C) * E_C`, exactly; None when E_B or E_C is 0.

    The overhead the candidate avoided for the useful work it did: a cohort that did more
    work is not credited for its size, only for its rate (negative: a regression).
    """
    e_b, e_c = baseline.effective_gpu_us, candidate.effective_gpu_us
    if not e_b or not e_c:
        return None
    return {
        t: {c: Fraction(baseline.overhead_gpu_us[t][c] * e_c, e_b)
            - candidate.overhead_gpu_us[t][c] for c in COMPONENTS}
        for t in OVERHEAD_TERMS
    }


def _share(part: Fraction, total: Fraction) -> float | None:
    return float(part / total) if total else None


def impact(baseline: Cohort, candidate: Cohort) -> dict[str, Any]:
    """The `GET /v1/impact` document for two cohorts (docs/impact.md)."""
    saved = savings_us(baseline, candidate)
    ett_b, ett_c = baseline.ett, candidate.ett
    delta = None if ett_b is None or ett_c is None else float(100 * (ett_c - ett_b))
    out: dict[str, Any] = {
        "baseline": cohort_wire(baseline),
        "candidate": cohort_wire(candidate),
        "delta_ett_pp": delta,
    }
    if saved is None:
        out["savings"] = {
            "total_gpu_seconds": None,
            "by_term": dict.fromkeys(OVERHEAD_TERMS),
            "by_component": dict.fromkeys(COMPONENTS),
            "by_term_component": {t: dict.fromkeys(COMPONENTS) for t in OVERHEAD_TERMS},
        }
        out.update(recovery_share=None, startup_credit={"direct": None, "cascade": None})
    else:
        by_term = {t: sum(saved[t].values(), Fraction(0)) for t in OVERHEAD_TERMS}
        by_component = {c: sum((saved[t][c] for t in OVERHEAD_TERMS), Fraction(0))
                        for c in COMPONENTS}
        total = sum(by_term.values(), Fraction(0))
        direct = sum((saved["tts"][c] for c in STARTUP_COMPONENTS), Fraction(0))
        cascade = direct + sum((saved["ttr"][c] for c in STARTUP_COMPONENTS), Fraction(0))
        out["savings"] = {
            "total_gpu_seconds": float(total / US_PER_SECOND),
            "by_term": {t: float(v / US_PER_SECOND) for t, v in by_term.items()},
            "by_component": {c: float(v / US_PER_SECOND) for c, v in by_component.items()},
            "by_term_component": {t: {c: float(v / US_PER_SECOND) for c, v in saved[t].items()}
                                  for t in OVERHEAD_TERMS},
        }
        out["recovery_share"] = _share(by_term["ttr"], total)
        out["startup_credit"] = {"direct": _share(direct, total),
                                 "cascade": _share(cascade, total)}
    out["ttr_to_tts_reduction"] = _reduction_ratio(baseline, candidate)
    return out


def _reduction_ratio(baseline: Cohort, candidate: Cohort) -> float | None:
    ttr_b, ttr_c = baseline.mean_ttr_us, candidate.mean_ttr_us
    tts_b, tts_c = baseline.mean_tts_us, candidate.mean_tts_us
    if ttr_b is None or ttr_c is None or tts_b is None or tts_c is None or tts_b == tts_c:
        return None
    return float((ttr_b - ttr_c) / (tts_b - tts_c))


def whatif(cohort: Cohort, component: str, reduction: float) -> dict[str, Any]:
    """The `GET /v1/whatif` document: shrink `component` by `reduction` (0..1).

    `direct` shrinks it inside TTS only (the first start); `cascade` inside every Level-1
    term (every restart repeats startup, and a faster save also shortens every in-loop
    stall). Projected ETT = E / (held - saved).
    """
    if component not in SHRINKABLE:
        raise ValueError(f"component: must be one of {', '.join(SHRINKABLE)}")
    if not 0 <= reduction <= 1:
        raise ValueError("reduction: must be between 0 and 1")
    share = Fraction(reduction)
    direct = share * cohort.overhead_gpu_us["tts"][component]
    cascade = share * sum(cohort.overhead_gpu_us[t][component] for t in OVERHEAD_TERMS)

    def projected(saved: Fraction) -> float | None:
        left = cohort.held_gpu_us - saved
        return float(cohort.effective_gpu_us / left) if left else None

    return {
        "cohort": cohort_wire(cohort),
        "component": component,
        "reduction": reduction,
        "ett_ratio": _f(cohort.ett),
        "projected_ett_ratio": {"direct": projected(direct), "cascade": projected(cascade)},
        "gpu_seconds_saved": {"direct": float(direct / US_PER_SECOND),
                              "cascade": float(cascade / US_PER_SECOND)},
    }
