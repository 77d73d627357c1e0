"""The committed files under deploy/ are exactly what the generators produce."""

from __future__ import annotations

from alerting_paths import ALERTMANAGER, RULES_DIR, SLO_SPEC, TEAMS

from service.cli.alerts import RULES_SUFFIX, alertmanager_text, rule_texts


def test_committed_rule_files_equal_the_generated_ones() -> None:
    generated = rule_texts(SLO_SPEC, TEAMS)
    committed = {p.name: p.read_text(encoding="utf-8") for p in RULES_DIR.glob(f"*{RULES_SUFFIX}")}
    assert sorted(committed) == sorted(generated), "run `ett rules`: the set of files differs"
    stale = [name for name, text in generated.items() if committed[name] != text]
    assert not stale, f"run `ett rules`: {stale} differ from deploy/slo.yaml"


def test_committed_alertmanager_config_equals_the_generated_one() -> None:
    assert ALERTMANAGER.read_text(encoding="utf-8") == alertmanager_text(TEAMS), (
        "run `ett alertmanager-config`: deploy/alertmanager/alertmanager.yml differs")
