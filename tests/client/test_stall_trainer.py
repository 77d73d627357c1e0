"""End to end: a real PyTorch trainer hangs, then dies, and the real service measures it.

`stall_trainer.py` trains a small MLP on CPU through the SDK against `ett serve`; its
recorder's heartbeat thread sends the latest step every HEARTBEAT_S. A real Prometheus
scrapes the service and evaluates the committed EttJobStalled rule.

- The hang: the loop blocks on a FIFO for a measured interval while the heartbeat thread
  keeps running. The hang, as progress sees it, runs from the step before the barrier to
  the step after it (the trainer's own clock). The service's `stalled` time must be the
  hang minus one median step interval, within the heartbeat period, and the alert must
  fire during the hang.
- The restart: the trainer saves its state every 50 steps without reporting a checkpoint,
  SIGKILLs itself, and a second attempt resumes from the saved step; the snapshot of the
  first attempt is inferred from that step.

The figures are printed (pytest -s) for the issue's closing note.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import REPO
from tests.e2e.stack import PROMETHEUS, prometheus, query

pytest.importorskip("torch")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not PROMETHEUS, reason="needs the prometheus binary")]

HEARTBEAT_S = 0.5
STALL_FLOOR_S = 4
STALL_FACTOR = 3
HANG_S = 10.0
WAKE_UP_S = 0.1
TRAINER = Path(__file__).with_name("stall_trainer.py")
STALL_RULES = REPO / "deploy" / "prometheus" / "rules" / "job-stalls.rules.yaml"


@pytest.fixture(scope="module")
def stack(pg_server_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from tests.conftest import ServiceProcess, create_database

    work = tmp_path_factory.mktemp("stalls")
    taxonomy = yaml.safe_load((REPO / "deploy" / "taxonomy.yaml").read_text())
    taxonomy.update(stall_floor=STALL_FLOOR_S, stall_factor=STALL_FACTOR)
    (work / "taxonomy.yaml").write_text(yaml.safe_dump(taxonomy))
    svc = ServiceProcess(create_database(pg_server_url, "ett_stall"), extra_env={
        "ETT_TAXONOMY": str(work / "taxonomy.yaml"), "ETT_AGGREGATE_INTERVAL_S": "1"})
    svc.start()
    rules = work / "rules"
    rules.mkdir()
    shutil.copy(STALL_RULES, rules / STALL_RULES.name)
    try:
        # No Alertmanager: the test reads the alert's state from Prometheus itself.
        with prometheus([svc.url.removeprefix("http://")], rules, "http://127.0.0.1:9", work,
                        interval="1s") as prom:
            yield svc, prom
    finally:
        svc.stop()


def launch(svc: Any, tmp: Path, job_id: str, attempt: int, *args: str) -> subprocess.Popen:
    env = {**os.environ, "ETT_URL": svc.url, "ETT_TOKEN": svc.token, "ETT_JOB_ID": job_id,
           "ETT_MODEL": "stall-mlp", "ETT_TEAM": "research", "ETT_ATTEMPT": str(attempt),
           "ETT_SPOOL_DIR": str(tmp / "spool"), "ETT_HEARTBEAT_S": str(HEARTBEAT_S),
           "PYTHONPATH": os.pathsep.join([str(REPO / "client"), str(REPO),
                                          os.environ.get("PYTHONPATH", "")])}
    for name in ("RANK", "WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT", "ETT_STRICT"):
        env.pop(name, None)
    cmd = [sys.executable, str(TRAINER), "--truth", str(tmp / "truth.jsonl"),
           "--state", str(tmp / "state.pt"), *args]
    return subprocess.Popen(cmd, env=env, stdout=(tmp / f"run{attempt}.log").open("wb"),
                            stderr=subprocess.STDOUT)


def truth(tmp: Path) -> list[dict[str, Any]]:
    path = tmp / "truth.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def first(facts: list[dict[str, Any]], what: str, **match: Any) -> dict[str, Any] | None:
    return next((f for f in facts if f["what"] == what
                 and all(f.get(k) == v for k, v in match.items())), None)


def job_result(svc: Any, job_id: str) -> dict[str, Any]:
    agg = httpx.post(svc.url + "/v1/aggregate", headers=svc.headers(), timeout=60)
    assert agg.status_code == 200, agg.text
    got = httpx.get(f"{svc.url}/v1/jobs/{job_id}", headers=svc.headers(), timeout=30)
    assert got.status_code == 200, got.text
    return got.json()


def firing(prom_url: str) -> bool:
    return bool(query(prom_url, 'ALERTS{alertname="EttJobStalled", alertstate="firing",'
                                ' model="stall-mlp"}'))


def test_a_hang_is_stalled_time_and_pages_while_it_lasts(stack, tmp_path: Path) -> None:
    svc, prom = stack
    job_id = f"hang-{uuid.uuid4().hex[:8]}"
    fifo = tmp_path / "barrier"
    os.mkfifo(fifo)
    proc = launch(svc, tmp_path, job_id, 0, "--steps", "160", "--hang-at", "110",
                  "--fifo", str(fifo))
    deadline = time.monotonic() + 120
    while first(truth(tmp_path), "hang_start") is None:
        assert proc.poll() is None and time.monotonic() < deadline, (
            (tmp_path / "run0.log").read_text()[-3000:])
        time.sleep(0.05)
    hang_start = first(truth(tmp_path), "hang_start")["t"]  # type: ignore[index]
    alert_at = None
    while time.time() < hang_start + HANG_S:
        if alert_at is None and firing(prom.url):
            alert_at = time.time()
        time.sleep(0.2)
    with fifo.open("w") as barrier:  # the trainer resumes
        barrier.write("go")
    assert proc.wait(timeout=120) == 0, (tmp_path / "run0.log").read_text()[-3000:]
    facts = truth(tmp_path)
    blocked = first(facts, "hang_end")["t"] - hang_start  # type: ignore[index]
    # The hang as progress sees it: from step 110 to step 111 (the barrier's wait plus
    # the one step that follows it).
    hang = (first(facts, "step", step=111)["t"]  # type: ignore[index]
            - first(facts, "step", step=110)["t"])  # type: ignore[index]
    result = job_result(svc, job_id)
    [progress] = result["progress"]
    median = progress["median_interval_seconds"]
    stalled = result["phases"].get("stalled", 0.0)
    figures = {"barrier_wait_s": round(blocked, 3), "hang_s": round(hang, 3),
               "stalled_s": stalled, "median_interval_s": median,
               "threshold_s": progress["threshold_seconds"],
               "expected_stalled_s": round(hang - median, 3),
               "hang_start_to_alert_firing_s": None if alert_at is None
               else round(alert_at - hang_start, 3),
               "advances": progress["advances"]}
    print("\nstall figures:", json.dumps(figures))
    assert result["state"] == "completed"
    assert progress["threshold_seconds"] == max(STALL_FLOOR_S, STALL_FACTOR * median)
    # Steps reach the service on heartbeats, so both ends of the gap are known to a
    # heartbeat period; 0.1 s more for the thread's wake-ups on a loaded machine.
    assert abs(stalled - (hang - median)) <= HEARTBEAT_S + WAKE_UP_S, figures
    assert result["owners"].get("reliability", 0.0) == pytest.approx(stalled)
    assert alert_at is not None and alert_at - hang_start < hang, figures
    # Once the job is done, nothing is stalled any more.
    assert not firing(prom.url) or _resolves(prom.url)


def _resolves(prom_url: str, timeout_s: float = 15) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not firing(prom_url):
            return True
        time.sleep(0.5)
    return False


def test_a_restart_from_an_unreported_save_infers_the_snapshot(stack, tmp_path: Path) -> None:
    svc, _prom = stack
    job_id = f"restart-{uuid.uuid4().hex[:8]}"
    dying = launch(svc, tmp_path, job_id, 0, "--steps", "200", "--save-every", "50",
                   "--die-at", "130")
    assert dying.wait(timeout=120) == -9, (tmp_path / "run0.log").read_text()[-3000:]
    resumed = launch(svc, tmp_path, job_id, 1, "--steps", "200", "--save-every", "50")
    assert resumed.wait(timeout=120) == 0, (tmp_path / "run1.log").read_text()[-3000:]
    facts = truth(tmp_path)
    assert first(facts, "resumed", attempt=1)["step"] == 100  # type: ignore[index]
    reached = first(facts, "step", attempt=0, step=100)["t"]  # type: ignore[index]
    restart = first(facts, "allocated", attempt=1)["t"]  # type: ignore[index]
    trained = first(facts, "training", attempt=0)["t"]  # type: ignore[index]
    result = job_result(svc, job_id)
    lost = result["phases"].get("lost_progress", 0.0)
    figures = {"lost_progress_s": lost, "truth_restart_minus_step_100_s": round(
        restart - reached, 3), "all_training_of_attempt_0_s": round(restart - trained, 3),
        "snapshot_from_steps": result["diagnostics"]["snapshot_from_steps"]}
    print("\nrestart figures:", json.dumps(figures))
    assert result["diagnostics"]["snapshot_from_steps"] == [0]
    assert [a["end_cause"] for a in result["attempts"]] == ["lost", "completed"]
    # The snapshot is the first heartbeat at step 100 or more: up to one heartbeat period
    # after the loop reached it (the clocks of the trainer and the SDK agree closely).
    assert restart - reached - HEARTBEAT_S - 0.1 <= lost <= restart - reached + 0.1, figures
    assert result["phases"].get("stalled", 0.0) == 0.0
