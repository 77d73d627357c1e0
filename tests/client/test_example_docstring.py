"""The example trainer's docstring is the first command a user copies: it must run with the
setting that records a killed worker as what it is (an infra failure, not a preemption),
give the job a team, and match how the real-trainer test runs it."""

from __future__ import annotations

import ast
import re

from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "train_elastic.py"


def docstring_env() -> dict[str, str]:
    doc = ast.get_docstring(ast.parse(EXAMPLE.read_text())) or ""
    command = doc.split("restarts it after a failure:", 1)[1].split("\n\n", 2)[1]
    return dict(re.findall(r"\b(ETT_[A-Z_]+)=(\S+)", command))


def test_the_docstring_runs_the_example_with_the_recommended_settings() -> None:
    env = docstring_env()
    assert env["ETT_SIGTERM_CAUSE"] == "infra"
    assert env["ETT_TEAM"] and env["ETT_MODEL"] and env["ETT_JOB_ID"]
    assert env["ETT_TOKEN"].startswith("$(cat")  # the token make run printed and stored


def test_the_real_trainer_test_runs_it_the_same_way() -> None:
    launch = (REPO / "tests" / "client" / "test_integration.py").read_text()
    assert '"ETT_SIGTERM_CAUSE": "infra"' in launch
    assert "ETT_SIGTERM_CAUSE=infra" in (REPO / "docs" / "client.md").read_text()
