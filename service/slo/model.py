"""Service levels as data: the SLO spec, its burn-rate windows and the teams that own them.

The spec is semantic (an SLI *kind* plus its parameters), not raw PromQL: the metric
catalog in docs/design.md is fixed, so the renderer in service/alerts.py owns the queries
and the spec can be checked (`service.slo.load`) for the mistakes people actually make (a
component that does not exist, an objective of 90 instead of 0.90, a team with no receiver).

Burn-rate windows are data too (the ``burn_rate.tiers`` block), with the source cited in
the file; ``derive_windows`` turns them into per-SLO factors (see docs/alerts.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ett_core.taxonomy import COMPONENTS
from service.errors import ConfigError

# effective_training is the fleet-ETT SLO, not a budget of its own.
BUDGET_COMPONENTS = tuple(c for c in COMPONENTS if c != "effective_training")

RATIO_KINDS = ("fleet_ett", "component_share", "pipeline_freshness", "ingest_errors")
QUANTILE_KINDS = ("time_to_start", "time_to_recover")
RATE_KINDS = ("failure_rate",)
SLI_KINDS = RATIO_KINDS + RATE_KINDS + QUANTILE_KINDS
PIPELINE_KINDS = ("pipeline_freshness", "ingest_errors")
SEVERITIES = ("page", "ticket")

_DURATION = re.compile(r"^(\d+)(s|m|h|d|w)$")
_UNIT_S = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}


class SpecError(ConfigError):
    """The SLO spec or the teams file is invalid; the message lists every problem found."""


def parse_duration(text: str) -> int:
    """'5m' -> 300. Only whole Prometheus units, so the generated rules read back the same."""
    match = _DURATION.match(str(text).strip())
    if not match:
        raise ValueError(f"bad duration {text!r}: use a number and one of s, m, h, d, w (e.g. 6h)")
    return int(match.group(1)) * _UNIT_S[match.group(2)]


def format_duration(seconds: int) -> str:
    """300 -> '5m': the largest unit that divides exactly (Prometheus reads all of them)."""
    if seconds <= 0:
        raise ValueError(f"duration must be positive, got {seconds}s")
    for unit in ("d", "h", "m", "s"):
        if seconds % _UNIT_S[unit] == 0:
            return f"{seconds // _UNIT_S[unit]}{unit}"
    raise AssertionError("unreachable: every integer divides by 1s")


@dataclass(frozen=True)
class Tier:
    """One multiwindow burn-rate pair of the SRE Workbook: both windows must burn."""

    severity: str
    long_s: int
    short_s: int
    budget_consumed: float  # share of the period's error budget burnt within long_s


@dataclass(frozen=True)
class QuantileWindow:
    severity: str
    long_s: int
    short_s: int


@dataclass(frozen=True)
class BurnWindow:
    """A tier applied to one SLO: windows plus the derived burn-rate factor."""

    severity: str
    long_s: int
    short_s: int
    factor: float


@dataclass(frozen=True)
class Slo:
    name: str
    alert: str
    sli: str
    team: str
    description: str
    absent_severity: str
    period_s: int | None = None
    objective: float | None = None
    component: str | None = None
    max_age_seconds: float | None = None
    max_per_1000_gpu_hours: float | None = None
    quantile: float | None = None
    threshold_seconds: float | None = None

    @property
    def category(self) -> str:
        """'pipeline' alerts inhibit the others in Alertmanager (their numbers are stale)."""
        return "pipeline" if self.sli in PIPELINE_KINDS else "training"

    @property
    def budget(self) -> float:
        """The error budget in the SLI's own unit (a ratio, or failures per 1000 GPU-hours)."""
        if self.sli in RATE_KINDS:
            assert self.max_per_1000_gpu_hours is not None
            return self.max_per_1000_gpu_hours
        assert self.objective is not None
        return 1.0 - self.objective

    @property
    def max_burn(self) -> float | None:
        """Highest reachable burn rate: an error ratio cannot exceed 1. None for rates."""
        return None if self.sli in RATE_KINDS else 1.0 / self.budget


@dataclass(frozen=True)
class SloSpec:
    runbook_base_url: str
    data_team: str
    absent_for_s: int
    burn_rate_source: str
    max_burn_headroom: float
    tiers: tuple[Tier, ...]
    quantile_windows: tuple[QuantileWindow, ...]
    slos: tuple[Slo, ...]

    @property
    def teams(self) -> set[str]:
        return {s.team for s in self.slos} | {self.data_team}


@dataclass(frozen=True)
class Team:
    name: str
    webhook_url: str | None = None


@dataclass(frozen=True)
class TeamsSpec:
    webhook_base: str
    catch_all: str
    teams: tuple[Team, ...]

    def names(self) -> list[str]:
        return [t.name for t in self.teams]


def derive_windows(slo: Slo, spec: SloSpec) -> tuple[BurnWindow, ...]:
    """Burn-rate factor per tier: budget_consumed * period / long window (SRE Workbook).

    Then two corrections the Workbook's fixed 14.4/6/1 never needed for a 30-day 99.9% SLO:
    a floor of 1 (below it the alert fires while the SLO is being met, e.g. 10% of a 7-day
    budget in 3 days is 0.23x), and a cap of headroom * 1/(1 - objective) (above the maximum
    reachable burn rate the alert could never fire, e.g. 14.4x for a 90% objective).
    """
    assert slo.period_s is not None
    windows = []
    for tier in spec.tiers:
        factor = max(tier.budget_consumed * slo.period_s / tier.long_s, 1.0)
        if slo.max_burn is not None:
            factor = min(factor, spec.max_burn_headroom * slo.max_burn)
        windows.append(BurnWindow(tier.severity, tier.long_s, tier.short_s, round(factor, 4)))
    return tuple(windows)


def scale_window(seconds: int, scale: float, min_window_s: int) -> int:
    """Shortened windows for end-to-end tests; never below what rate() can use."""
    if scale == 1.0:
        return seconds
    return max(round(seconds * scale), min_window_s)
