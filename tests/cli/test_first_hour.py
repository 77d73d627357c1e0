"""What a new user's first commands print: usage errors as one stderr line with exit code
2, report rows labelled with their scope, columns that mean something for each grouping,
hints on empty answers, durations that keep their precision, tables within 80 columns."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from service.cli import main
from tests.cli.test_first_run import WINDOW, ett, one_line_error, rows
from tests.conftest import REPO
from tests.factories import event


@pytest.mark.parametrize("command", [
    ("demo",), ("demo", "--scenario", "worked-example"), ("impact", "--around", "1"),
    ("whatif", "--component", "compilation", "--reduction", "0.5"), ("annotate", "a change"),
])
def test_a_missing_token_is_one_stderr_line_and_exit_2(tmp_path, command) -> None:
    result = ett(*command, "--url", "http://127.0.0.1:9", cwd=tmp_path)
    line = one_line_error(result)
    assert result.stdout == ""
    assert line.startswith(f"ett {command[0]}: needs a token: pass --token TOKEN, set"
                           " ETT_ADMIN_TOKEN, or run it where `make run` runs"), line
    assert line.endswith("which is not there)"), line


def test_ett_impact_refuses_to_compare_a_cohort_with_itself(tmp_path) -> None:
    for args in ((), ("--baseline-label", "variant:a", "--candidate-label", "variant:a"),
                 ("--baseline-start", "2026-11-01", "--candidate-start", "2026-11-01")):
        line = one_line_error(ett("impact", *args, "--token", "t", cwd=tmp_path))
        assert "the baseline and the candidate are the same cohort" in line, line
        assert "--baseline-label variant:baseline --candidate-label variant:optimized" in line
        assert "--around ANNOTATION_ID" in line


def test_other_usage_errors_are_one_line_and_exit_2(tmp_path) -> None:
    assert "--table is for --scenario paired" in one_line_error(
        ett("demo", "--table", "--scenario", "rollout", cwd=tmp_path))
    assert "expected COMPONENT=FACTORx[:TEAM]" in one_line_error(
        ett("demo", "--regress", "nonsense", "--token", "t", cwd=tmp_path))


def test_ett_dashboards_without_its_extra_names_the_extra(tmp_path) -> None:
    # The run set leaves out the Grafana SDK: hide it, as a `make run` venv lacks it.
    code = ("import sys; sys.modules['grafana_foundation_sdk'] = None;"
            " from service.cli import main; sys.exit(main(['dashboards', '--out', 'out']))")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, text=True,
                            capture_output=True, timeout=60, env={
                                "PYTHONPATH": f"{REPO}:{REPO / 'client'}", "PATH": "/usr/bin"})
    line = one_line_error(result)
    assert line.startswith("ett dashboards: needs the Grafana SDK"), line
    assert "pip install -e '.[dashboards]'" in line


def test_report_rows_are_labelled_with_their_scope(aggregated, capsys) -> None:
    assert main(["report", "--team", "ads", *WINDOW]) == 0
    out = capsys.readouterr().out
    assert ["team ads", "21.3", "56.2%", "12.0", "0.0", "0.0%", "0.0"] in rows(out), out
    assert "fleet" not in out
    assert main(["report", "--team", "ads", "--model", "model-a", *WINDOW]) == 0
    assert rows(capsys.readouterr().out)[0][0] == "team ads, model model-a"
    assert main(["report", *WINDOW]) == 0
    assert rows(capsys.readouterr().out)[0][0] == "fleet"


def test_report_by_component_or_owner_shows_shares_not_an_ett(aggregated, capsys) -> None:
    assert main(["report", "--by", "component", *WINDOW]) == 0
    out = capsys.readouterr().out
    assert "ETT" not in out and "share of held" in out
    # docs/model.md section 6: effective 90 of 160 min (12.0 GPU-h, 56.2 %), wasted 30.
    assert ["effective_training", "12.0", "56.2%"] in rows(out), out
    assert ["wasted_training", "4.0", "18.8%"] in rows(out), out
    assert main(["report", "--by", "owner", *WINDOW]) == 0
    out = capsys.readouterr().out
    assert ["compiler", "2.0", "9.4%"] in rows(out), out


def test_a_team_that_only_owns_phases_is_pointed_at_its_bill(aggregated, capsys) -> None:
    assert main(["report", "--team", "compiler", *WINDOW]) == 0
    out = capsys.readouterr().out
    assert "team compiler runs no models" in out
    assert "`ett report --team compiler --bill`" in out


def test_a_quiet_window_says_what_is_not_aggregated_yet(aggregated, capsys) -> None:
    assert main(["report", "--start", "2026-10-01T00:00:00Z",
                 "--end", "2026-10-02T00:00:00Z"]) == 0
    assert "not counted yet: `ett aggregate` runs one" in capsys.readouterr().out


def test_a_sub_second_job_keeps_its_precision_within_80_columns(api, database_url,
                                                                 monkeypatch, capsys) -> None:
    """The README snippet's first job, at its shortest: its figures read in ms, not 0.0 s."""
    monkeypatch.setenv("ETT_DATABASE_URL", database_url)
    monkeypatch.setenv("ETT_LOG_LEVEL", "warning")
    monkeypatch.setenv("COLUMNS", "80")
    ms = 1 / 60_000  # a millisecond in the factories' minutes
    events = [event("allocated", 0, job_id="quick", model="m", gpus=8, team="t"),
              event("phase_start", 0, job_id="quick", model="m", phase="compilation"),
              event("phase_end", 40 * ms, job_id="quick", model="m", phase="compilation"),
              event("phase_start", 40 * ms, job_id="quick", model="m", phase="training"),
              event("phase_end", 140 * ms, job_id="quick", model="m", phase="training"),
              event("released", 150 * ms, job_id="quick", model="m",
                    attrs={"reason": "completed"})]
    assert api.post("/v1/events", json={"events": events}).json()["rejected"] == []
    assert api.post("/v1/aggregate").status_code == 200
    assert main(["report", "--job", "quick"]) == 0
    out = capsys.readouterr().out
    assert "held 150 ms, effective 100 ms" in out, out
    assert "0.0 s" not in out
    assert max(len(line) for line in out.splitlines()) <= 80, out
    # The attempts table shows whole instants with milliseconds, never cut.
    assert re.search(r"00:00:00\.000\s+00:00:00\.150\s+8\s+completed\s+150 ms", out), out
    assert main(["report", "--job", "quick", "--by", "team"]) == 2
    assert "--job shows one job" in capsys.readouterr().err


def test_ett_advise_says_what_is_not_aggregated_yet(aggregated, capsys, tmp_path) -> None:
    assert main(["advise", "checkpoints", "--start", "2026-10-01T00:00:00Z",
                 "--end", "2026-10-02T00:00:00Z"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("no attempts started between") and "`ett aggregate`" in out
    assert "start: " in one_line_error(ett("advise", "checkpoints", "--start", "yesterday",
                                           cwd=tmp_path))
