"""The command line in front of a new user: one-line start-up errors, no database created
by accident, a port check before anything starts, and `ett report`'s tables."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from service.cli import main


def ett(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("ETT_")}
    return subprocess.run([sys.executable, "-m", "service.cli", *args], cwd=cwd,
                          env={**base, "ETT_LOG_LEVEL": "warning", **env}, text=True,
                          capture_output=True, timeout=120)


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize("command", [
    ("tokens", "list"), ("report",), ("aggregate",), ("migrate",),
    ("prune", "--older-than-days", "500"),
])
def test_commands_other_than_serve_never_create_a_database(tmp_path, command) -> None:
    line = one_line_error(ett(*command, cwd=tmp_path))
    assert line.startswith(f"ett {command[0]}: no ETT database at {tmp_path / '.ett-data'}")
    assert "ETT_DATA_DIR" in line and "ETT_DATABASE_URL" in line
    assert not (tmp_path / ".ett-data").exists()


@pytest.mark.parametrize("url, expected", [
    ("postgresql://ett:secret@127.0.0.1:1/ett",
     "ett migrate: cannot use PostgreSQL at postgresql://ett:***@127.0.0.1:1/ett: "),
    ("mysql://ett@db/ett", "ett migrate: ETT_DATABASE_URL: database URL must be postgresql://"),
    ("not a url", "ett migrate: ETT_DATABASE_URL: Could not parse"),
])
def test_a_bad_database_url_is_one_line_naming_what_to_check(tmp_path, url, expected) -> None:
    line = one_line_error(ett("migrate", cwd=tmp_path, ETT_DATABASE_URL=url))
    assert line.startswith(expected), line
    assert "secret" not in line


def test_a_bad_setting_is_one_line_naming_the_variable(tmp_path) -> None:
    line = one_line_error(ett("serve", cwd=tmp_path, ETT_HEARTBEAT_TIMEOUT_S="ten"))
    assert line.startswith("ett serve: bad setting: ETT_HEARTBEAT_TIMEOUT_S='ten': ")
    assert not (tmp_path / ".ett-data").exists()


def test_a_bad_taxonomy_is_one_line_with_file_and_line(tmp_path, database_url, db_engine) -> None:
    bad = tmp_path / "taxonomy.yaml"
    bad.write_text("components:\n  training: [\n")
    line = one_line_error(ett("aggregate", cwd=tmp_path, ETT_DATABASE_URL=database_url,
                              ETT_TAXONOMY=str(bad)))
    assert line.startswith(f"ett aggregate: {bad}:"), line
    assert "not valid YAML" in line


def test_serve_checks_the_port_before_anything_starts(tmp_path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        result = ett("serve", "--port", str(port), cwd=tmp_path)
    line = one_line_error(result)
    assert line == (f"ett serve: port {port} on 127.0.0.1 is already in use by another program"
                    f" (pid {os.getpid()}): stop it with `kill {os.getpid()}` (or Ctrl-C where"
                    f" it runs), or choose another port: `make run PORT={port + 1}` /"
                    f" `ett serve --port {port + 1}`")
    assert "listening" not in result.stdout
    assert not (tmp_path / ".ett-data").exists()


def test_a_second_serve_names_the_running_ett_server(tmp_path, service) -> None:
    result = ett("serve", "--port", str(service.port), cwd=tmp_path,
                 ETT_DATABASE_URL=service.database_url)
    line = one_line_error(result)
    pid = service.proc.pid
    assert f"already in use by an ETT telemetry server (pid {pid})" in line
    assert f"`kill {pid}`" in line
    assert "listening" not in result.stdout


def rows(out: str) -> list[list[str]]:
    """The body rows of the tables rich drew, as lists of cell texts."""
    return [[c.strip() for c in line.strip().strip("│").split("│")]
            for line in out.splitlines() if line.strip().startswith("│")]


WINDOW = ["--start", "2026-11-01T00:00:00Z", "--end", "2026-11-02T00:00:00Z"]


def test_report_by_team_prints_the_api_answer_as_a_table(aggregated, capsys) -> None:
    assert main(["report", "--by", "team", *WINDOW]) == 0
    out = capsys.readouterr().out
    # docs/model.md section 6: 160 min x 8 GPUs = 21.3 GPU-h held, 90 / 160 = 56.25%.
    assert ["ads", "21.3", "56.2%", "12.0", "0.0", "0.0%", "0.0"] in rows(out), out
    assert main(["report", "--by", "team", "--json", *WINDOW]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["groups"][0]["held_gpu_seconds"] == 160 * 60 * 8


def test_report_of_the_fleet_shows_where_the_time_went(aggregated, capsys) -> None:
    assert main(["report", *WINDOW]) == 0
    out = capsys.readouterr().out
    # wasted 30 min x 8 GPUs = 4.0 GPU-h, 30 / 160 = 18.8%.
    assert ["wasted_training", "4.0", "18.8%"] in rows(out), out


def test_report_of_a_team_bill_and_of_one_job(aggregated, capsys) -> None:
    assert main(["report", "--team", "compiler", "--bill", *WINDOW]) == 0
    out = capsys.readouterr().out
    # compilation 10 + 5 minutes on 8 GPUs = 2.0 lost GPU-hours.
    assert out.startswith("compiler bill: 2.0 lost GPU-hours the team owns, 2026-11-01 00:00")
    assert ["compilation", "2.0"] in rows(out) and ["model-a", "2.0"] in rows(out)
    assert main(["report", "--job", "job-1"]) == 0
    out = capsys.readouterr().out
    assert "ETT 56.2%, held 2.67 h, effective 1.50 h" in out  # 160 and 90 minutes
    assert ["TTR (NoF 1)", "44.0 min"] in rows(out), out  # TTR_1 = 44 min
    assert main(["report", "--bill"]) == 2
    assert main(["report", "--job", "nope"]) == 2
    assert "job 'nope' is unknown" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_run_passes_host_and_port_to_ett_serve() -> None:
    from tests.conftest import REPO

    dry = subprocess.run(["make", "-n", "-o", ".venv/.installed-run", "run", "HOST=0.0.0.0",
                          "PORT=9000"], cwd=REPO, capture_output=True, text=True, check=True)
    assert ".venv/bin/ett serve --demo --host 0.0.0.0 --port 9000" in dry.stdout.splitlines()


def test_serve_on_every_interface_says_how_others_reach_it(service_factory, pg_server_url
                                                           ) -> None:
    svc = service_factory(args=("--host", "0.0.0.0", "--no-aggregator"))
    out = svc.log_path.read_text()
    assert f"ETT telemetry listening on http://0.0.0.0:{svc.port}" in out
    assert f"reachable from other machines as http://{socket.getfqdn()}:{svc.port}" in out
