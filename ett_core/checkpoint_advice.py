"""Checkpoint advice: a recommended interval and the expected ETT at any interval.

Inputs are what a model's attempts showed over a window (docs/checkpoints.md):
M, the mean held time between interruptions; d, the blocking cost of one durable
checkpoint; R, what a restart costs besides lost progress; and the observed interval.

- Young (1974): tau = sqrt(2 d M), the first-order optimum.
- Daly (2006), the higher-order optimum: tau = sqrt(2 d M) * (1 + sqrt(d / 2M) / 3
  + (d / 2M) / 9) - d when d < 2M, else M.
- Kokolis et al. (2024), expected effective training time ratio at interval tau with
  Poisson interruptions, restarts from the latest durable snapshot and saves that block
  for d: E[ETTR] = (1 - (R + tau / 2) / M) / (1 + d / tau).

Seconds as floats here, not integer microseconds: these are statistical estimates, never
sums that must be conserved. Pure, like the rest of the core.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

MIN_INTERRUPTIONS = 3


def young_interval(d: float, m: float) -> float:
    return math.sqrt(2.0 * d * m)


def daly_interval(d: float, m: float) -> float:
    if d >= 2.0 * m:
        # Checkpointing costs more than the time between failures: once per failure.
        return m
    ratio = d / (2.0 * m)
    return math.sqrt(2.0 * d * m) * (1.0 + math.sqrt(ratio) / 3.0 + ratio / 9.0) - d


def expected_ettr(tau: float, m: float, d: float, r: float) -> float:
    """Kokolis et al.'s E[ETTR], clamped at 0: the formula turns negative when a restart and
    half an interval outlast the time between failures, where a job makes no progress."""
    if tau <= 0 or m <= 0:
        raise ValueError("tau and m must be positive")
    return max(0.0, 1.0 - (r + tau / 2.0) / m) / (1.0 + d / tau)


@dataclass(frozen=True, slots=True)
class Observations:
    """A model's attempts that started in one window, summed."""

    window_days: float
    held_seconds: float  # plain wall seconds of the attempts
    held_gpu_hours: float
    interruptions: int
    blocking_save_seconds: float
    durable_checkpoints: int
    ttr_seconds: float  # summed over the interruptions
    lost_progress_seconds: float  # summed over the interruptions
    observed_interval_seconds: float | None  # the median interval; None: no two snapshots


@dataclass(frozen=True, slots=True)
class Advice:
    status: str  # ok | insufficient_data
    reason: str | None
    interruptions: int
    mtbf_seconds: float | None
    checkpoint_cost_seconds: float | None
    restart_overhead_seconds: float | None
    interval_observed: float | None
    interval_young: float | None
    interval_daly: float | None
    ettr_observed: float | None
    ettr_daly: float | None
    lost_observed: float | None
    lost_expected: float | None
    saving_gpu_hours_per_day: float | None

    def to_wire(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "reason": self.reason,
            "interruptions": self.interruptions,
            "mtbf_seconds": self.mtbf_seconds,
            "checkpoint_cost_seconds": self.checkpoint_cost_seconds,
            "restart_overhead_seconds": self.restart_overhead_seconds,
            "interval_seconds": {"observed": self.interval_observed,
                                 "young": self.interval_young, "daly": self.interval_daly},
            "expected_ettr": {"observed": self.ettr_observed, "daly": self.ettr_daly},
            "lost_progress_per_failure_seconds": {"observed": self.lost_observed,
                                                  "expected": self.lost_expected},
            "projected_saving_gpu_hours_per_day": self.saving_gpu_hours_per_day,
        }


def _why_not(obs: Observations) -> str | None:
    """Why the observations cannot support advice, or None when they can."""
    if obs.held_seconds <= 0:
        return "no attempts of this model started in the window"
    if obs.interruptions < MIN_INTERRUPTIONS:
        return (f"{obs.interruptions} interruption(s) in the window; at least "
                f"{MIN_INTERRUPTIONS} are needed to estimate the time between them")
    if obs.durable_checkpoints == 0:
        return "no durable checkpoints in the window"
    if obs.blocking_save_seconds <= 0:
        return ("checkpoints reported no blocking checkpoint_save time, so their cost is "
                "unknown (wrap the blocking part of a save in a checkpoint_save phase)")
    return None


def advise(obs: Observations) -> Advice:
    """The advice for one model; what cannot be computed is None, never an error."""
    n = obs.interruptions
    m = obs.held_seconds / n if n and obs.held_seconds > 0 else None
    d = obs.blocking_save_seconds / obs.durable_checkpoints if obs.durable_checkpoints else None
    r = max(0.0, (obs.ttr_seconds - obs.lost_progress_seconds) / n) if n else None
    tau_obs = obs.observed_interval_seconds
    lost_obs = obs.lost_progress_seconds / n if n else None
    lost_exp = tau_obs / 2.0 if tau_obs is not None else None
    reason = _why_not(obs)
    young = daly = ettr_obs = ettr_daly = saving = None
    if reason is None and m is not None and d is not None and r is not None:
        young, daly = young_interval(d, m), daly_interval(d, m)
        ettr_daly = expected_ettr(daly, m, d, r)
        if tau_obs is not None and tau_obs > 0:
            ettr_obs = expected_ettr(tau_obs, m, d, r)
            if obs.window_days > 0:
                saving = (ettr_daly - ettr_obs) * obs.held_gpu_hours / obs.window_days
        else:
            reason = ("no attempt made two durable checkpoints, so the observed interval "
                      "is unknown; the recommendation stands, the comparison does not")
    status = "insufficient_data" if daly is None else "ok"
    return Advice(
        status=status, reason=reason, interruptions=n, mtbf_seconds=m,
        checkpoint_cost_seconds=d, restart_overhead_seconds=r,
        interval_observed=tau_obs, interval_young=young, interval_daly=daly,
        ettr_observed=ettr_obs, ettr_daly=ettr_daly,
        lost_observed=lost_obs, lost_expected=lost_exp, saving_gpu_hours_per_day=saving,
    )
