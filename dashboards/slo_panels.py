"""SLO status and burn-rate queries for the Team dashboard, built from deploy/slo.yaml.

The SLO spec is the single source: the same functions that render the Prometheus rules
(service/alerts.py) name the recording rules and the raw-counter SLIs used here, so a panel
cannot drift from the alerts that page. Recording rules carry only an `slo` label, so each
SLO's series gets its owning `team` added with label_replace, and `and on(team)` keeps the
dashboard's `$team`.
"""

from __future__ import annotations

from pathlib import Path

from service.alerts import record_name, sli_error_query
from service.slo.load import load_slo_spec
from service.slo.model import QUANTILE_KINDS, Slo, SloSpec, derive_windows, format_duration

REPO = Path(__file__).resolve().parent.parent
SLO_SPEC = REPO / "deploy" / "slo.yaml"

TEAM_FILTER = 'and on(team) label_replace(vector(1), "team", "$team", "", "")'


def load_spec(path: Path = SLO_SPEC) -> SloSpec:
    return load_slo_spec(path)


def _labelled(expr: str, slo: Slo) -> str:
    # `slo` is set too: raw-counter SLIs come back without it.
    inner = f'label_replace({expr}, "slo", "{slo.name}", "", "")'
    return f'label_replace({inner}, "team", "{slo.team}", "", "")'


def _union(parts: list[str]) -> str:
    body = "\n  or\n  ".join(parts) if parts else "vector(0) * 0"
    return f"(\n  {body}\n)\n{TEAM_FILTER}"


def budget_slos(spec: SloSpec) -> list[Slo]:
    """SLOs with an error budget (ratio or rate), in spec order."""
    return [s for s in spec.slos if s.sli not in QUANTILE_KINDS]


def quantile_slos(spec: SloSpec) -> list[Slo]:
    return [s for s in spec.slos if s.sli in QUANTILE_KINDS]


def burn_windows(spec: SloSpec) -> list[str]:
    """The long windows of the alerting tiers ("1h", "6h", "3d"): recorded for every SLO."""
    seen: list[str] = []
    for slo in budget_slos(spec)[:1]:
        for w in derive_windows(slo, spec):
            name = format_duration(w.long_s)
            if name not in seen:
                seen.append(name)
    return seen


def burn_rate_expr(spec: SloSpec, window: str) -> str:
    """Burn rate (error over `window` / budget) of each budget SLO of `$team`."""
    parts = [_labelled(f'{record_name(s, window)}{{slo="{s.name}"}} / {s.budget:g}', s)
             for s in budget_slos(spec)]
    return _union(parts)


def budget_consumed_expr(spec: SloSpec) -> str:
    """Share of each SLO's error budget spent over its whole period, from raw counters.

    No recording rule covers the full period (the longest is the ticket tier's window), so
    this reads the counters directly: heavier, but only for a handful of instant queries.
    """
    parts = []
    for s in budget_slos(spec):
        assert s.period_s is not None
        period = format_duration(s.period_s)
        parts.append(_labelled(f"({sli_error_query(s, period)}) / {s.budget:g}", s))
    return _union(parts)


def quantile_ratio_expr(spec: SloSpec) -> str:
    """Each quantile SLO's recorded quantile over its threshold (above 1: violated)."""
    parts = []
    for s in quantile_slos(spec):
        short = format_duration(min(w.short_s for w in spec.quantile_windows))
        parts.append(_labelled(
            f'{record_name(s, short)}{{slo="{s.name}"}} / {s.threshold_seconds:g}', s))
    return _union(parts)


def recording_rule_names(spec: SloSpec) -> set[str]:
    """Recording rules the panels read (tests check the generated rules define them)."""
    names = {record_name(s, w) for s in budget_slos(spec) for w in burn_windows(spec)}
    short = format_duration(min(w.short_s for w in spec.quantile_windows))
    names |= {record_name(s, short) for s in quantile_slos(spec)}
    return names
