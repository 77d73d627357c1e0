"""EttJobStalled's rule follows the taxonomy's stall owner."""

from __future__ import annotations

from pathlib import Path

import yaml
from alerting_paths import RULES_DIR

from service.cli.alerts import DEFAULT_SPEC, DEFAULT_TAXONOMY, rule_texts
from service.slo.stalls import STALL_RULES_FILE


def _rule(texts: dict[str, str]) -> dict:
    [group] = yaml.safe_load(texts[STALL_RULES_FILE])["groups"]
    [rule] = group["rules"]
    return rule


def test_the_committed_rule_pages_reliability_naming_the_models_team() -> None:
    rule = _rule({STALL_RULES_FILE: (RULES_DIR / STALL_RULES_FILE).read_text()})
    assert rule["labels"]["team"] == "reliability"
    assert '"model_team", "$1", "team"' in rule["expr"]
    assert _rule(rule_texts(DEFAULT_SPEC, None, taxonomy_path=DEFAULT_TAXONOMY)) == rule


def test_another_owner_or_the_models_own_team(tmp_path: Path) -> None:
    taxonomy = yaml.safe_load(DEFAULT_TAXONOMY.read_text())
    for owner, team in (("sre", "sre"), (None, None)):
        taxonomy["stall_owner"] = owner
        path = tmp_path / "taxonomy.yaml"
        path.write_text(yaml.safe_dump(taxonomy))
        rule = _rule(rule_texts(DEFAULT_SPEC, None, taxonomy_path=path))
        # Without an owner the series' own team (the model's) is the alert's team.
        assert rule["labels"].get("team") == team
