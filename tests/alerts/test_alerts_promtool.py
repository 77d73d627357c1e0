"""The generated rules pass `promtool check rules` and the unit tests in deploy/prometheus/tests."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml
from alerting_paths import PROM_TESTS_DIR, RULES_DIR, RUNBOOKS

from service.cli.alerts import RULES_SUFFIX


def _run(cmd: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)


def _alerts() -> list[dict]:
    out = []
    for path in sorted(RULES_DIR.glob(f"*{RULES_SUFFIX}")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            out += [r for r in group["rules"] if "alert" in r]
    return out


def test_promtool_accepts_the_generated_rules(promtool: str) -> None:
    files = sorted(str(p) for p in RULES_DIR.glob(f"*{RULES_SUFFIX}"))
    result = _run([promtool, "check", "rules", *files])
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_pass(promtool: str) -> None:
    files = sorted(p.name for p in PROM_TESTS_DIR.glob("*.test.yaml"))
    result = _run([promtool, "test", "rules", *files], cwd=PROM_TESTS_DIR)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_of_every_slo_is_exercised_by_a_unit_test() -> None:
    tested: set[tuple[str, str]] = set()
    for path in PROM_TESTS_DIR.glob("*.test.yaml"):
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                for alert in check.get("exp_alerts", []):
                    labels = alert["exp_labels"]
                    tested.add((labels["alertname"], labels.get("slo", "")))
    wanted = {(r["alert"], r["labels"].get("slo", "")) for r in _alerts()}
    assert wanted - tested == set(), "alerts that no unit test sees firing"


def test_every_alert_carries_routing_labels_and_a_runbook_that_exists() -> None:
    for rule in _alerts():
        assert rule["labels"]["severity"] in ("page", "ticket"), rule["alert"]
        assert rule["labels"]["team"], rule["alert"]
        assert {"summary", "description", "runbook_url"} <= set(rule["annotations"])
        page = rule["annotations"]["runbook_url"].rsplit("/", 1)[1]
        assert page == f"{rule['alert']}.md"
        assert (RUNBOOKS / page).is_file(), f"docs/runbooks/{page} is missing"


def test_every_slo_has_an_absent_data_alert() -> None:
    alerts = _alerts()
    slos = {r["labels"]["slo"] for r in alerts if "slo" in r["labels"]}  # job alerts have none
    absent = {r["labels"]["slo"] for r in alerts if r["alert"] == "EttSloDataAbsent"}
    assert absent == slos
