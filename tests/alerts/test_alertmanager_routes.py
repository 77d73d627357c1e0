"""The generated Alertmanager config is valid and routes each team's alerts to it."""

from __future__ import annotations

import subprocess

from alerting_paths import ALERTMANAGER, ROUTES_SCRIPT, TEAMS

from service.alerts import render_alertmanager_config
from service.slo.load import load_teams


def test_amtool_accepts_the_generated_config(amtool: str) -> None:
    result = subprocess.run([amtool, "check-config", str(ALERTMANAGER)], capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_routing_cases_in_the_script_pass(amtool: str) -> None:
    result = subprocess.run(["bash", str(ROUTES_SCRIPT), str(ALERTMANAGER)], capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_script_fails_when_a_case_is_wrong(amtool: str, tmp_path) -> None:
    # Same config minus the compiler route: the compilation alert must now be reported.
    text = ALERTMANAGER.read_text().replace('team="compiler"', 'team="compiler-gone"')
    broken = tmp_path / "alertmanager.yml"
    broken.write_text(text)
    result = subprocess.run(["bash", str(ROUTES_SCRIPT), str(broken)], capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 1
    assert "should route to compiler" in result.stdout


def test_every_team_gets_a_receiver_named_after_it_and_a_catch_all_exists() -> None:
    teams = load_teams(TEAMS)
    config = render_alertmanager_config(teams)
    names = [r["name"] for r in config["receivers"]]
    assert names == [teams.catch_all, *teams.names()]
    assert config["route"]["receiver"] == teams.catch_all


def test_webhook_base_points_every_team_at_the_test_sink() -> None:
    config = render_alertmanager_config(load_teams(TEAMS), webhook_base="http://127.0.0.1:9/x/")
    urls = {r["name"]: r["webhook_configs"][0]["url"] for r in config["receivers"]}
    assert urls["compiler"] == "http://127.0.0.1:9/x/compiler"
    assert urls["catch-all"] == "http://127.0.0.1:9/x/catch-all"


def test_pipeline_pages_inhibit_the_other_alerts() -> None:
    rules = render_alertmanager_config(load_teams(TEAMS))["inhibit_rules"]
    assert {"source_matchers": ['category="pipeline"', 'severity="page"',
                                'alertname!="EttAggregationQuarantine"'],
            "target_matchers": ['category!="pipeline"']} in rules
