"""Loading deploy/slo.yaml and deploy/teams.yaml into the SLO model, with every problem
named by its place in the file, all of them at once."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from .model import (
    BUDGET_COMPONENTS,
    QUANTILE_KINDS,
    RATIO_KINDS,
    SEVERITIES,
    SLI_KINDS,
    QuantileWindow,
    Slo,
    SloSpec,
    SpecError,
    Team,
    TeamsSpec,
    Tier,
    parse_duration,
)

_SLUG = re.compile(r"^[a-z][a-z0-9-]{0,62}$")
_ALERT = re.compile(r"^[A-Z][A-Za-z0-9]{2,80}$")

_COMMON_KEYS = {"name", "alert", "sli", "team", "description", "absent_severity"}
_KIND_KEYS: dict[str, set[str]] = {
    "fleet_ett": {"objective", "period"},
    "component_share": {"objective", "period", "component"},
    "pipeline_freshness": {"objective", "period", "max_age_seconds"},
    "ingest_errors": {"objective", "period"},
    "failure_rate": {"max_per_1000_gpu_hours", "period"},
    "time_to_start": {"quantile", "threshold_seconds"},
    "time_to_recover": {"quantile", "threshold_seconds"},
}


class _Problems:
    """Collects every problem so one run of the CLI shows them all, each with its place."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.items: list[str] = []

    def add(self, where: str, message: str) -> None:
        self.items.append(f"{where}: {message}")

    def raise_if_any(self) -> None:
        if self.items:
            lines = "\n".join(f"  - {p}" for p in self.items)
            raise SpecError(f"{self.source} is invalid:\n{lines}")


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise SpecError(f"{path}: file not found") from exc
    except yaml.YAMLError as exc:
        raise SpecError(f"{path}: not valid YAML: {exc}") from exc


def _number(raw: dict[str, Any], key: str, where: str, p: _Problems, lo: float, hi: float,
            hi_open: bool = True) -> float | None:
    value = raw.get(key)
    if value is None:
        p.add(where, f"missing '{key}'")
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        p.add(where, f"'{key}' must be a number, got {value!r}")
        return None
    ok = lo < value and (value < hi if hi_open else value <= hi)
    if not ok:
        bound = f"< {hi}" if hi_open else f"<= {hi}"
        hint = " (write a ratio: 0.9 for 90%)" if key == "objective" and value >= 1 else ""
        p.add(where, f"'{key}' must be > {lo} and {bound}, got {value!r}{hint}")
        return None
    return float(value)


def _duration(raw: dict[str, Any], key: str, where: str, p: _Problems) -> int | None:
    if raw.get(key) is None:
        p.add(where, f"missing '{key}'")
        return None
    try:
        return parse_duration(raw[key])
    except ValueError as exc:
        p.add(where, f"'{key}': {exc}")
        return None


def _severity(value: Any, where: str, p: _Problems) -> str:
    if value not in SEVERITIES:
        p.add(where, f"severity must be one of {', '.join(SEVERITIES)}, got {value!r}")
        return "ticket"
    return str(value)


def _parse_slo(raw: Any, index: int, spec_tiers: tuple[Tier, ...], headroom: float,
               p: _Problems) -> Slo | None:
    where = f"slos[{index}]"
    if not isinstance(raw, dict):
        p.add(where, "must be a mapping")
        return None
    name = raw.get("name")
    if not isinstance(name, str) or not _SLUG.match(name):
        p.add(where, f"'name' must be lower-case letters, digits and '-', got {name!r}")
    else:
        where = f"{where} ({name})"
    alert = raw.get("alert")
    if not isinstance(alert, str) or not _ALERT.match(alert):
        p.add(where, f"'alert' must be a CamelCase alert name, got {alert!r}")
    team = raw.get("team")
    if not isinstance(team, str) or not team:
        p.add(where, "missing 'team': every SLO needs an owning team to route its alerts to")
    elif not _SLUG.match(team):
        p.add(where, f"'team' must be lower-case letters, digits and '-', got {team!r}")
    kind = raw.get("sli")
    if kind not in SLI_KINDS:
        p.add(where, f"unknown sli {kind!r}; known: {', '.join(SLI_KINDS)}")
        return None
    for key in sorted(set(raw) - _COMMON_KEYS - _KIND_KEYS[kind]):
        p.add(where, f"unknown key '{key}' for sli {kind}")

    fields: dict[str, Any] = {}
    if "period" in _KIND_KEYS[kind]:
        fields["period_s"] = _duration(raw, "period", where, p)
    if kind in RATIO_KINDS:
        fields["objective"] = _number(raw, "objective", where, p, 0.0, 1.0)
        objective = fields["objective"]
        if objective is not None and headroom / (1.0 - objective) < 1.0:
            p.add(where, f"objective {objective} is too low for burn-rate alerting: the "
                         f"reachable burn rate 1/(1 - objective) times the headroom "
                         f"{headroom} is below 1")
    if kind == "component_share":
        component = raw.get("component")
        if component not in BUDGET_COMPONENTS:
            p.add(where, f"unknown component {component!r}; budgets exist for: "
                         f"{', '.join(BUDGET_COMPONENTS)} (effective_training is fleet_ett)")
        fields["component"] = component
    if kind == "pipeline_freshness":
        fields["max_age_seconds"] = _number(raw, "max_age_seconds", where, p, 0.0, 1e9)
    if kind == "failure_rate":
        fields["max_per_1000_gpu_hours"] = _number(
            raw, "max_per_1000_gpu_hours", where, p, 0.0, 1e9)
    if kind in QUANTILE_KINDS:
        fields["quantile"] = _number(raw, "quantile", where, p, 0.0, 1.0)
        fields["threshold_seconds"] = _number(raw, "threshold_seconds", where, p, 0.0, 1e9)
    period_s = fields.get("period_s")
    if period_s is not None and spec_tiers and period_s < max(t.long_s for t in spec_tiers):
        p.add(where, f"'period' {raw['period']} is shorter than the longest alert window")
    absent = _severity(raw.get("absent_severity", "ticket"), f"{where} absent_severity", p)
    if not isinstance(name, str) or any(v is None for v in fields.values()):
        return None
    return _build(raw, kind, absent, fields)


def _build(raw: dict[str, Any], kind: str, absent: str, fields: dict[str, Any]) -> Slo:
    return Slo(name=str(raw.get("name")), alert=str(raw.get("alert")), sli=kind,
               team=str(raw.get("team")), description=str(raw.get("description", "")).strip(),
               absent_severity=absent, **fields)


def _parse_tiers(raw: Any, p: _Problems) -> tuple[Tier, ...]:
    if not isinstance(raw, list) or not raw:
        p.add("burn_rate.tiers", "must be a non-empty list")
        return ()
    tiers = []
    for i, item in enumerate(raw):
        where = f"burn_rate.tiers[{i}]"
        if not isinstance(item, dict):
            p.add(where, "must be a mapping")
            continue
        long_s, short_s = _duration(item, "long", where, p), _duration(item, "short", where, p)
        consumed = _number(item, "budget_consumed", where, p, 0.0, 1.0, hi_open=False)
        severity = _severity(item.get("severity"), where, p)
        if long_s and short_s and short_s >= long_s:
            p.add(where, "'short' must be shorter than 'long'")
        if long_s and short_s and consumed:
            tiers.append(Tier(severity, long_s, short_s, consumed))
    return tuple(tiers)


def _parse_quantile_windows(raw: Any, p: _Problems) -> tuple[QuantileWindow, ...]:
    if not isinstance(raw, list) or not raw:
        p.add("quantile_windows", "must be a non-empty list")
        return ()
    out = []
    for i, item in enumerate(raw):
        where = f"quantile_windows[{i}]"
        if not isinstance(item, dict):
            p.add(where, "must be a mapping")
            continue
        long_s, short_s = _duration(item, "long", where, p), _duration(item, "short", where, p)
        severity = _severity(item.get("severity"), where, p)
        if long_s and short_s:
            out.append(QuantileWindow(severity, long_s, short_s))
    return tuple(out)


def parse_slo_spec(raw: Any, source: str = "SLO spec") -> SloSpec:
    """Validate a loaded spec document; raise SpecError listing every problem."""
    p = _Problems(source)
    if not isinstance(raw, dict):
        p.add("top level", "must be a mapping with 'slos'")
        p.raise_if_any()
    if raw.get("version") != 1:
        p.add("version", f"must be 1, got {raw.get('version')!r}")
    burn = raw.get("burn_rate") or {}
    if not isinstance(burn, dict):
        p.add("burn_rate", "must be a mapping")
        burn = {}
    if not str(burn.get("source", "")).strip():
        p.add("burn_rate.source", "cite where the windows come from")
    headroom = _number(burn, "max_burn_headroom", "burn_rate", p, 0.0, 1.0, hi_open=False)
    tiers = _parse_tiers(burn.get("tiers"), p)
    qwindows = _parse_quantile_windows(raw.get("quantile_windows"), p)
    data_team = raw.get("data_team")
    if not isinstance(data_team, str) or not _SLUG.match(data_team):
        p.add("data_team", f"must name the team that owns missing-data alerts, got {data_team!r}")
    absent_for_s = _duration(raw, "absent_for", "top level", p)
    base = raw.get("runbook_base_url")
    if not isinstance(base, str) or not base:
        p.add("runbook_base_url", "missing: alerts link to <base>/<alert>.md")
    slos_raw = raw.get("slos")
    slos: list[Slo] = []
    if not isinstance(slos_raw, list) or not slos_raw:
        p.add("slos", "must be a non-empty list")
        slos_raw = []
    for i, item in enumerate(slos_raw):
        slo = _parse_slo(item, i, tiers, headroom or 1.0, p)
        if slo is not None:
            slos.append(slo)
    seen: set[str] = set()
    for slo in slos:
        if slo.name in seen:
            p.add(f"slos ({slo.name})", "duplicate SLO name")
        seen.add(slo.name)
    p.raise_if_any()
    return SloSpec(runbook_base_url=str(base).rstrip("/"), data_team=str(data_team),
                   absent_for_s=int(absent_for_s or 0), burn_rate_source=str(burn["source"]),
                   max_burn_headroom=float(headroom or 1.0), tiers=tiers,
                   quantile_windows=qwindows, slos=tuple(slos))


def parse_teams(raw: Any, source: str = "teams file") -> TeamsSpec:
    p = _Problems(source)
    if not isinstance(raw, dict):
        p.add("top level", "must be a mapping with 'teams'")
        p.raise_if_any()
    base = raw.get("webhook_base")
    if not isinstance(base, str) or not base.startswith(("http://", "https://")):
        p.add("webhook_base", f"must be an http(s) URL, got {base!r}")
    catch_all = raw.get("catch_all_receiver")
    if not isinstance(catch_all, str) or not _SLUG.match(catch_all):
        p.add("catch_all_receiver", f"must be a receiver name, got {catch_all!r}")
    teams: list[Team] = []
    items = raw.get("teams")
    if not isinstance(items, list) or not items:
        p.add("teams", "must be a non-empty list")
        items = []
    for i, item in enumerate(items):
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str) or not _SLUG.match(name):
            p.add(f"teams[{i}]", f"'name' must be lower-case letters, digits and '-', "
                                 f"got {name!r}")
            continue
        url = item.get("webhook_url")
        if url is not None and not str(url).startswith(("http://", "https://")):
            p.add(f"teams[{i}] ({name})", f"'webhook_url' must be an http(s) URL, got {url!r}")
        if name == catch_all:
            p.add(f"teams[{i}] ({name})", "a team may not share the catch-all receiver's name")
        if name in {t.name for t in teams}:
            p.add(f"teams[{i}] ({name})", "duplicate team")
        teams.append(Team(name, url))
    p.raise_if_any()
    return TeamsSpec(webhook_base=str(base).rstrip("/"), catch_all=str(catch_all),
                     teams=tuple(teams))


def check_teams_known(spec: SloSpec, teams: TeamsSpec, source: str = "SLO spec") -> None:
    """Every team an alert can carry must have a receiver, or its alerts go unrouted."""
    known = set(teams.names())
    p = _Problems(source)
    for slo in spec.slos:
        if slo.team not in known:
            p.add(f"slos ({slo.name})", f"team {slo.team!r} is not in the teams file; "
                                        f"known: {', '.join(sorted(known))}")
    if spec.data_team not in known:
        p.add("data_team", f"team {spec.data_team!r} is not in the teams file")
    p.raise_if_any()


def load_slo_spec(path: Path) -> SloSpec:
    return parse_slo_spec(_read_yaml(path), source=str(path))


def load_teams(path: Path) -> TeamsSpec:
    return parse_teams(_read_yaml(path), source=str(path))
