"""Spec validation names the problem; burn-rate factors follow the documented derivation."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from alerting_paths import SLO_SPEC, TEAMS

from service.slo.load import (
    check_teams_known,
    load_slo_spec,
    load_teams,
    parse_slo_spec,
    parse_teams,
)
from service.slo.model import SpecError, derive_windows, format_duration, parse_duration


def _raw() -> dict[str, Any]:
    return yaml.safe_load(SLO_SPEC.read_text())


def _slo(raw: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in raw["slos"] if s["name"] == name)


def _error(raw: Any) -> str:
    with pytest.raises(SpecError) as info:
        parse_slo_spec(raw, source="deploy/slo.yaml")
    return str(info.value)


def test_the_committed_spec_and_teams_file_are_valid_and_agree() -> None:
    check_teams_known(load_slo_spec(SLO_SPEC), load_teams(TEAMS))


def test_an_objective_written_as_a_percentage_is_rejected_with_a_hint() -> None:
    raw = _raw()
    _slo(raw, "fleet-ett")["objective"] = 90
    message = _error(raw)
    assert "slos[0] (fleet-ett): 'objective' must be > 0.0 and < 1.0, got 90" in message
    assert "write a ratio: 0.9 for 90%" in message


def test_an_objective_too_low_for_burn_rate_alerting_is_rejected() -> None:
    raw = _raw()
    _slo(raw, "fleet-ett")["objective"] = 0.3
    assert "objective 0.3 is too low for burn-rate alerting" in _error(raw)


def test_an_unknown_component_is_named_with_the_known_ones() -> None:
    raw = _raw()
    _slo(raw, "compilation-share")["component"] = "compile"
    message = _error(raw)
    assert "(compilation-share): unknown component 'compile'" in message
    assert "scheduling, initialization, compilation" in message


def test_effective_training_is_not_a_component_budget() -> None:
    raw = _raw()
    _slo(raw, "compilation-share")["component"] = "effective_training"
    assert "unknown component 'effective_training'" in _error(raw)


def test_a_missing_team_is_reported() -> None:
    raw = _raw()
    del _slo(raw, "time-to-start")["team"]
    assert "(time-to-start): missing 'team'" in _error(raw)


def test_a_team_without_a_receiver_is_reported() -> None:
    raw = _raw()
    _slo(raw, "compilation-share")["team"] = "compilers"
    with pytest.raises(SpecError, match="team 'compilers' is not in the teams file"):
        check_teams_known(parse_slo_spec(raw), load_teams(TEAMS))


def test_every_problem_is_listed_at_once_with_its_place() -> None:
    raw = _raw()
    _slo(raw, "fleet-ett")["objective"] = 1.5
    _slo(raw, "scheduling-share")["component"] = "queue"
    _slo(raw, "failure-rate")["perod"] = "7d"
    message = _error(raw)
    assert message.startswith("deploy/slo.yaml is invalid:")
    assert "(fleet-ett): 'objective'" in message
    assert "(scheduling-share): unknown component 'queue'" in message
    assert "(failure-rate): unknown key 'perod'" in message


def test_unknown_sli_kind_and_duplicate_names_are_rejected() -> None:
    raw = _raw()
    raw["slos"].append(copy.deepcopy(_slo(raw, "fleet-ett")))
    _slo(raw, "ingest-errors")["sli"] = "latency"
    message = _error(raw)
    assert "unknown sli 'latency'" in message
    assert "(fleet-ett): duplicate SLO name" in message


def test_a_bad_duration_says_how_to_write_one() -> None:
    raw = _raw()
    _slo(raw, "fleet-ett")["period"] = "1 week"
    assert "'period': bad duration '1 week'" in _error(raw)


def test_the_burn_rate_source_must_be_cited() -> None:
    raw = _raw()
    raw["burn_rate"]["source"] = ""
    assert "burn_rate.source: cite where the windows come from" in _error(raw)


def test_teams_file_rejects_a_team_named_like_the_catch_all() -> None:
    raw = yaml.safe_load(TEAMS.read_text())
    raw["teams"].append({"name": "catch-all"})
    with pytest.raises(SpecError, match="may not share the catch-all receiver's name"):
        parse_teams(raw)


def test_durations_round_trip() -> None:
    assert [parse_duration(t) for t in ("30s", "5m", "1h", "3d", "1w")] == [
        30, 300, 3600, 259200, 604800]
    assert [format_duration(s) for s in (30, 300, 3600, 259200, 90)] == [
        "30s", "5m", "1h", "3d", "90s"]


def _factors(name: str) -> list[float]:
    spec = load_slo_spec(SLO_SPEC)
    slo = next(s for s in spec.slos if s.name == name)
    return [w.factor for w in derive_windows(slo, spec)]


def test_a_30_day_slo_gets_the_workbook_factors() -> None:
    assert _factors("pipeline-freshness") == [14.4, 6.0, 1.0]


def test_a_7_day_slo_scales_the_factors_and_floors_the_ticket_at_one() -> None:
    # 2% of 168h in 1h = 3.36; 5% in 6h = 1.4; 10% in 3d = 0.23, floored to 1.
    assert _factors("fleet-ett") == [3.36, 1.4, 1.0]


def test_a_factor_above_the_reachable_burn_rate_is_capped() -> None:
    # A 90% objective over 30 days: 14.4x is out of reach (max 10x); capped at 0.5 * 10.
    raw = _raw()
    _slo(raw, "fleet-ett")["period"] = "30d"
    spec = parse_slo_spec(raw)
    slo = next(s for s in spec.slos if s.name == "fleet-ett")
    assert [w.factor for w in derive_windows(slo, spec)] == [5.0, 5.0, 1.0]
