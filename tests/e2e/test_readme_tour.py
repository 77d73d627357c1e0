"""The README, followed from a fresh clone: `make run` in the background, the tour's
commands, the SDK snippet against the running service, the example trainer under torchrun
after `make trainer`, a second `make run` refused in one
line, then Ctrl-C (SIGINT to the terminal's process group), and nothing left running.

The clone builds its own `.venv` through `make run`, as a newcomer's would. The only change
to the README's commands is the port: the tour's 8080 becomes a free port, passed as
`make run PORT=...` (the README's documented way), so parallel runs cannot collide.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO, free_port

pytestmark = pytest.mark.slow
README = REPO / "README.md"
JOB = "ads_ctr_000-s7-w00001"


def readme_blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), re.DOTALL)


def tour_commands(port: int) -> list[str]:
    """The tour's shell lines (the block that sets TOKEN), run in one shell so they share it."""
    block = next(b for b in readme_blocks("sh") if "TOKEN=$(cat .ett-data/admin-token)" in b)
    return [line.replace("localhost:8080", f"localhost:{port}")
            for line in block.splitlines() if line.strip()]


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def processes_under(path: Path) -> list[str]:
    """Command lines of live processes that mention the clone (its venv, its PostgreSQL)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(path) in cmd:
            found.append(f"{proc.name}: {cmd[:200]}")
    return found


@pytest.mark.skipif(shutil.which("make") is None or shutil.which("curl") is None,
                    reason="the README's commands need make and curl")
def test_the_readme_from_a_fresh_clone(tmp_path) -> None:
    clone = tmp_path / "ett"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(clone)], check=True)
    port = free_port()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ETT_", "VIRTUAL_ENV"))}
    env["PYTHON"] = sys.executable  # any Python 3.11+; the clone builds its own .venv
    log = (tmp_path / "make-run.log").open("w+")
    run = subprocess.Popen(["make", "run", f"PORT={port}"], cwd=clone, env=env, stdout=log,
                           stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 900  # includes building .venv from scratch
        while not port_open(port):
            assert run.poll() is None, Path(log.name).read_text()[-4000:]
            assert time.monotonic() < deadline, Path(log.name).read_text()[-4000:]
            time.sleep(1)
        out = Path(log.name).read_text()
        assert f"ETT telemetry listening on http://127.0.0.1:{port}" in out, out[-4000:]
        token = (clone / ".ett-data" / "admin-token").read_text().strip()
        auth = {"Authorization": f"Bearer {token}"}
        base = f"http://127.0.0.1:{port}"

        # The tour's job comes from the demo fleet: wait until it has been aggregated.
        deadline = time.monotonic() + 600
        while httpx.get(f"{base}/v1/jobs/{JOB}", headers=auth, timeout=30).status_code != 200:
            assert run.poll() is None, Path(log.name).read_text()[-4000:]
            assert time.monotonic() < deadline, f"{JOB} never appeared"
            time.sleep(5)
        # After the back-fill the demo posts the showcase: the paired benchmark, then the
        # roll-out with its annotations (the last thing it posts).
        since = time.strftime("%Y-%m-%dT00:00:00Z", time.gmtime(time.time() - 60 * 86400))
        while len(httpx.get(f"{base}/v1/annotations", headers=auth, timeout=30, params={
                "start": since, "tag": "rollout"}).json()["annotations"]) < 5:
            assert run.poll() is None, Path(log.name).read_text()[-4000:]
            assert time.monotonic() < deadline, "the roll-out's annotations never appeared"
            time.sleep(5)
        httpx.post(f"{base}/v1/aggregate", headers=auth, timeout=300).raise_for_status()
        # The showcase pages have figures on first load: labelled cohorts, advice.
        doc = httpx.get(f"{base}/v1/impact", headers=auth, timeout=60, params={
            "baseline_label": "variant:baseline", "candidate_label": "variant:optimized"}).json()
        assert doc["baseline"]["jobs"] >= 6 and doc["candidate"]["jobs"] >= 6, doc
        assert doc["delta_ett_pp"] > 0
        advised = [m["model"] for m in httpx.get(f"{base}/v1/models", headers=auth,
                                                 timeout=30).json()["models"]
                   if httpx.get(f"{base}/v1/models/{m['model']}/checkpoint-advice",
                                headers=auth, timeout=30).json()["status"] == "ok"]
        # Most of the fleet's 24 models (about four interruptions each in two days), not only
        # the paired and roll-out models.
        fleet = [m for m in advised if not m.startswith(("paired_", "rollout_"))]
        assert len(fleet) >= 12, advised

        script = "set -e\n" + "\n".join(
            f"echo '>>> {i}'\n{line}" for i, line in enumerate(tour_commands(port)))
        tour = subprocess.run(["bash", "-c", script], cwd=clone, env=env, text=True,
                              capture_output=True, timeout=300)
        assert tour.returncode == 0, tour.stdout[-3000:] + tour.stderr[-3000:]
        outputs = re.split(r">>> \d+\n", tour.stdout)[1:]
        assert len(outputs) == len(tour_commands(port))
        for command, output in zip(tour_commands(port), outputs, strict=True):
            if command.startswith("TOKEN="):
                continue
            assert output.strip(), f"no output from {command}"
            assert '"detail"' not in output, f"{command}: {output[:500]}"
        assert "ett_fleet_ett_ratio" in tour.stdout
        assert "compiler bill" in tour.stdout and "lost GPU-hours" in tour.stdout

        # The SDK snippet, as it stands in the README, against the running service.
        snippet = next(b for b in readme_blocks("python") if "from ett_client import" in b)
        (clone / "first_job.py").write_text(snippet.replace("127.0.0.1:8080",
                                                            f"127.0.0.1:{port}"))
        sdk = subprocess.run([str(clone / ".venv" / "bin" / "python"), "first_job.py"],
                             cwd=clone, env=env, text=True, capture_output=True, timeout=120)
        assert sdk.returncode == 0, sdk.stderr
        assert "Traceback" not in sdk.stderr, sdk.stderr
        httpx.post(f"{base}/v1/aggregate", headers=auth, timeout=300).raise_for_status()
        job = httpx.get(f"{base}/v1/jobs/my-first-job", headers=auth, timeout=30).json()
        assert (job["model"], job["team"], job["state"]) == ("my_model", "my-team", "completed")
        assert job["attempts"][0]["gpus"] == 8
        # A few seconds of phases, as the README says: compilation 1 s, training 3 s.
        assert job["components"]["compilation"] == pytest.approx(1.0, abs=0.3)
        assert job["effective_seconds"] == pytest.approx(3.0, abs=0.3)
        report = subprocess.run([str(clone / ".venv" / "bin" / "ett"), "report", "--job",
                                 "my-first-job"], cwd=clone, env={**env, "COLUMNS": "80"},
                                text=True, capture_output=True, timeout=120)
        assert report.returncode == 0, report.stderr
        assert re.search(r"held [34]\.\d\d s, effective [23]\.\d\d s", report.stdout), (
            report.stdout)

        # The example trainer, as the README runs it: `make trainer` (a CPU-only torch into
        # .venv), torchrun with one worker crashing, then its report.
        block = next(b for b in readme_blocks("sh") if "torchrun" in b)
        assert "make trainer" in block and "--index-url" not in block
        trainer = subprocess.run(
            ["bash", "-c", "set -e\n" + block.replace("127.0.0.1:8080", f"127.0.0.1:{port}")],
            cwd=clone, env=env, text=True, capture_output=True, timeout=900)
        assert trainer.returncode == 0, trainer.stdout[-3000:] + trainer.stderr[-3000:]
        freeze = subprocess.run([str(clone / ".venv" / "bin" / "python"), "-m", "pip", "freeze"],
                                text=True, capture_output=True, check=True).stdout.lower()
        assert "torch==2.13.0" in freeze and "nvidia" not in freeze, freeze  # no CUDA stack
        assert "demo-1" in trainer.stdout and "infra" in trainer.stdout, trainer.stdout
        elastic = httpx.get(f"{base}/v1/jobs/demo-1", headers=auth, timeout=30).json()
        assert (elastic["team"], elastic["state"]) == ("ml-platform", "completed"), elastic
        assert len(elastic["attempts"]) == 2, elastic["attempts"]

        # A second `make run` while this one is up: one line, nothing started.
        second = subprocess.run(["make", "run", f"PORT={port}"], cwd=clone, env=env,
                                text=True, capture_output=True, timeout=300)
        assert second.returncode != 0
        assert "listening" not in second.stdout
        assert (f"port {port} on 127.0.0.1 is already in use by an ETT telemetry server"
                in second.stderr), second.stderr
        assert "Traceback" not in second.stderr
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGINT)  # Ctrl-C in the terminal
        try:
            run.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
            raise
    deadline = time.monotonic() + 30
    while (processes_under(clone) or port_open(port)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not processes_under(clone), processes_under(clone)
    assert not port_open(port)
    tail = Path(log.name).read_text()[-2000:]
    assert "ETT telemetry stopped" in tail and "Traceback" not in tail, tail
    # make itself got the Ctrl-C too and dies of it (-SIGINT); what it ran stopped cleanly,
    # so make reports no error of its own.
    assert run.returncode in (0, -signal.SIGINT), (run.returncode, tail)
    assert "make: ***" not in tail, tail
