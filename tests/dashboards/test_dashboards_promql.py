"""Every PromQL expression of every panel parses, checked by promtool like Prometheus would."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

pytest.importorskip("grafana_foundation_sdk")

from dashboards.queries import all_promql

PROMTOOL = shutil.which("promtool")


def test_every_panel_expression_is_valid_promql(tmp_path: Path) -> None:
    if PROMTOOL is None:
        pytest.skip("promtool not installed (Debian package prometheus)")
    exprs = all_promql({"team": "reliability", "model": "ads_ctr"})
    assert len(exprs) > 40
    # One recording rule per expression: promtool parses each and names the failing one.
    rules = [{"record": f"dashboard:check_{i}:expr", "expr": expr}
             for i, (_, _, expr) in enumerate(exprs)]
    path = tmp_path / "dashboards.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    result = subprocess.run([PROMTOOL, "check", "rules", str(path)],
                            capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        lines = [f"{i}: {uid} / {title}: {expr}" for i, (uid, title, expr) in enumerate(exprs)]
        pytest.fail(result.stdout + result.stderr + "\n" + "\n".join(lines))


def test_multi_valued_variables_stay_valid_promql(tmp_path: Path) -> None:
    # Grafana renders several picked values as a regex alternation.
    if PROMTOOL is None:
        pytest.skip("promtool not installed (Debian package prometheus)")
    exprs = all_promql({"team": "(reliability|scheduler)", "model": "(ads_ctr|llm\\\\.7b)"})
    rules = [{"record": f"dashboard:multi_{i}:expr", "expr": e} for i, (_, _, e) in
             enumerate(exprs)]
    path = tmp_path / "multi.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "multi", "rules": rules}]}))
    result = subprocess.run([PROMTOOL, "check", "rules", str(path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
