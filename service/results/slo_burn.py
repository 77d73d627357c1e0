"""Current burn of the SLOs whose SLI the database can answer (fleet ETT, component shares).

The alert rules compute the same ratios from rates of the exported settled counters; this
reads settled GPU time from the rollups over the same windows ending now, so the console
shows the budget burn without a Prometheus. The two can differ slightly: a counter's rate
counts time when it was exported, the rollup counts it at the instant it was held.
A tier burns when both its windows are over its factor, as in the generated alerts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine

from service.slo.model import Slo, SloSpec, derive_windows, format_duration
from service.store import queries as q

DB_KINDS = ("fleet_ett", "component_share")
EFFECTIVE = "effective_training"


@dataclass(frozen=True)
class Burn:
    slo: Slo
    computed: bool  # False: the SLI lives in Prometheus only (rates, quantiles, pipeline)
    status: str  # ok, page, ticket, no data, or "see Prometheus"
    error: float | None = None  # error ratio over the shortest long window
    burn: float | None = None  # error / budget over that window
    window: str | None = None
    budget_used: float | None = None  # error / budget over the whole period

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.slo.name, "description": self.slo.description,
                "sli": self.slo.sli, "objective": self.slo.objective,
                "computed": self.computed, "status": self.status, "error": self.error,
                "burn": self.burn, "window": self.window, "budget_used": self.budget_used}


def _error(slo: Slo, settled: dict[str, int]) -> float | None:
    held = sum(settled.values())
    if not held:
        return None
    if slo.sli == "fleet_ett":
        return 1.0 - settled.get(EFFECTIVE, 0) / held
    return settled.get(slo.component or "", 0) / held


def team_burns(engine: Engine, spec: SloSpec, team: str, now: datetime) -> list[Burn]:
    """The burn of each SLO `team` owns, one rollup read per distinct window."""
    slos = [s for s in spec.slos if s.team == team]
    windows: set[int] = set()
    for slo in slos:
        if slo.sli in DB_KINDS:
            assert slo.period_s is not None
            windows.add(slo.period_s)
            for w in derive_windows(slo, spec):
                windows.update((w.long_s, w.short_s))
    settled: dict[int, dict[str, int]] = {}
    with engine.connect() as conn:
        for seconds in sorted(windows):
            rows = q.window_rows(conn, now - timedelta(seconds=seconds), now, [])
            settled[seconds] = {r["component"]: r["settled"] for r in rows}
    out = []
    for slo in slos:
        if slo.sli not in DB_KINDS:
            out.append(Burn(slo, computed=False, status="see Prometheus"))
            continue
        tiers = derive_windows(slo, spec)
        status = "ok"
        for tier in tiers:
            errors = [_error(slo, settled[s]) for s in (tier.long_s, tier.short_s)]
            if all(e is not None and e / slo.budget > tier.factor for e in errors):
                status = "page" if tier.severity == "page" or status == "page" else "ticket"
        first = min(tiers, key=lambda t: t.long_s)
        error = _error(slo, settled[first.long_s])
        period_error = _error(slo, settled[slo.period_s or first.long_s])
        out.append(Burn(
            slo, computed=True, status=status if error is not None else "no data",
            error=error, burn=None if error is None else error / slo.budget,
            window=format_duration(first.long_s),
            budget_used=None if period_error is None else period_error / slo.budget))
    return out
