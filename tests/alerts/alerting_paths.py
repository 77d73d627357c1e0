"""Paths the alerting tests share (a module of its own: conftest is not importable)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SLO_SPEC = ROOT / "deploy" / "slo.yaml"
TEAMS = ROOT / "deploy" / "teams.yaml"
RULES_DIR = ROOT / "deploy" / "prometheus" / "rules"
PROM_TESTS_DIR = ROOT / "deploy" / "prometheus" / "tests"
ALERTMANAGER = ROOT / "deploy" / "alertmanager" / "alertmanager.yml"
ROUTES_SCRIPT = ROOT / "deploy" / "alertmanager" / "test-routes.sh"
RUNBOOKS = ROOT / "docs" / "runbooks"


