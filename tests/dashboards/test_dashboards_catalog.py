"""Every metric a panel names is in the catalog; every recording rule it reads is generated."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

pytest.importorskip("grafana_foundation_sdk")

from dashboards import slo_panels
from dashboards.k8s import rule_files, rule_groups
from dashboards.queries import all_promql

REPO = Path(__file__).resolve().parents[2]
VARS = {"team": "reliability", "model": "ads_ctr"}
# Series Prometheus makes itself.
BUILTIN = {"ALERTS", "up"}
HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")


def catalog_source() -> Path:
    """docs/metrics.md (the full reference) once it exists, else design.md's table."""
    full = REPO / "docs" / "metrics.md"
    return full if full.exists() else REPO / "docs" / "design.md"


def catalog_names(text: str) -> set[str]:
    """Metric names in backticks; `_1d` after `x_1h` is shorthand for `x_1d`."""
    names: set[str] = set()
    for line in text.splitlines():
        last = None
        for token in re.findall(r"`([a-z_][a-z0-9_]*)`", line):
            if token.startswith("ett_"):
                names.add(token)
                last = token
            elif token.startswith("_") and last:
                names.add(last.rsplit("_", 1)[0] + token)
    return names


def panel_metrics(expr: str) -> set[str]:
    names = set(re.findall(r"\b(ett_[a-z0-9_]+(?::[a-z0-9_]+)*)", expr))
    names |= {b for b in BUILTIN if re.search(rf"\b{b}\b", expr)}
    return names


def test_the_catalog_parser_expands_window_shorthand() -> None:
    names = catalog_names("| `ett_model_ett_ratio_1h`, `_1d`, `_7d` | gauge |")
    assert names == {"ett_model_ett_ratio_1h", "ett_model_ett_ratio_1d", "ett_model_ett_ratio_7d"}


def test_every_metric_a_panel_names_is_in_the_catalog() -> None:
    catalog = catalog_names(catalog_source().read_text(encoding="utf-8"))
    assert "ett_settled_gpu_seconds_total" in catalog
    missing = []
    for uid, title, expr in all_promql(VARS):
        for name in panel_metrics(expr) - BUILTIN:
            if ":" in name:
                continue  # recording rules: checked below
            base = next((name.removesuffix(s) for s in HISTOGRAM_SUFFIXES if name.endswith(s)),
                        name)
            if name not in catalog and base not in catalog:
                missing.append((uid, title, name))
    assert not missing, f"not in {catalog_source().name}: {missing}"


def _generated_records() -> set[str]:
    groups = rule_groups(rule_files(REPO), REPO)
    return {r["record"] for g in groups for r in g["rules"] if "record" in r}


def test_every_recording_rule_a_panel_reads_is_generated() -> None:
    records = _generated_records()
    used = {n for _, _, e in all_promql(VARS) for n in panel_metrics(e) if ":" in n}
    assert used, "the Team dashboard should read SLO recording rules"
    assert used <= records, f"not in the rules: {used - records}"
    assert slo_panels.recording_rule_names(slo_panels.load_spec()) <= records


def test_committed_rule_files_when_present_define_the_recording_rules_panels_read() -> None:
    files = rule_files(REPO)
    if not files:
        pytest.skip("deploy/prometheus/rules/ has no rule files yet")
    records = {r["record"] for p in files
               for g in (yaml.safe_load(p.read_text()) or {}).get("groups", [])
               for r in g["rules"] if "record" in r}
    assert slo_panels.recording_rule_names(slo_panels.load_spec()) <= records
