"""End to end: a real PyTorch job under torchelastic, killed and restarted, measured by the
real service, compared with what the job logged with its own clock.

`examples/train_elastic.py` runs on 2 CPU workers (gloo) with torch.compile and async DCP
checkpoints; in its first attempt worker 1 SIGKILLs itself, torchelastic restarts both, the
job resumes from its last durable checkpoint and completes. Rank 0 writes a ground-truth log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.client.trainer_truth import expected_from_log

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
TORCHRUN = Path(sys.executable).with_name("torchrun")


def launch(service: Any, tmp: Path, job_id: str, **extra: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "ETT_URL": service.url, "ETT_TOKEN": service.token,
           "ETT_JOB_ID": job_id, "ETT_MODEL": "tiny-mlp", "ETT_TEAM": "research",
           "ETT_SPOOL_DIR": str(tmp / "spool"), "ETT_SIGTERM_CAUSE": "infra",
           "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'client'}", **extra}
    for name in ("RANK", "WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT", "ETT_STRICT"):
        env.pop(name, None)
    cmd = [str(TORCHRUN), "--standalone", "--nnodes=1", "--nproc-per-node=2", "--max-restarts=2",
           str(REPO / "examples" / "train_elastic.py"), "--ckpt-dir", str(tmp / "ckpt"),
           "--crash-rank", "1", "--crash-step", "25", "--steps", "60", "--truth",
           str(tmp / "truth.jsonl"), "--close-timeout-s", "90", "--backoff-max-s", "2"]
    return subprocess.Popen(cmd, env=env, stdout=(tmp / "run.log").open("wb"),
                            stderr=subprocess.STDOUT)


def job_result(service: Any, job_id: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {service.token}"}
    agg = httpx.post(service.url + "/v1/aggregate", headers=headers, timeout=60)
    assert agg.status_code == 200, agg.text
    got = httpx.get(f"{service.url}/v1/jobs/{job_id}", headers=headers, timeout=30)
    assert got.status_code == 200, got.text
    return got.json()


def close_enough(got: float, want: float) -> bool:
    return abs(got - want) <= max(0.5, 0.02 * abs(want))


def check(result: dict[str, Any], truth: dict[str, Any]) -> None:
    # In full: pytest shortens a long tuple, and a one-off mismatch is only diagnosable whole.
    both = f"service: {json.dumps(result, sort_keys=True)}\ntruth: {json.dumps(truth)}"
    assert len(result["attempts"]) == truth["attempts"] == 2, both
    assert result["state"] == "completed"
    assert close_enough(result["held_seconds"], truth["held"]), both
    for name, want in truth["components"].items():
        assert close_enough(result["components"].get(name, 0.0), want), f"{name}\n{both}"
    assert close_enough(result["phases"].get("lost_progress", 0.0), truth["lost"]), both
    assert truth["lost"] > 0
    level1 = result["level1"]
    assert level1["nof"] == 1
    assert {k: v for k, v in level1["nof_by_cause"].items() if v} == {"infra": 1}


def test_a_killed_and_restarted_job_is_measured_like_its_own_log(service, tmp_path: Path):
    job_id = f"it-{uuid.uuid4().hex[:8]}"
    proc = launch(service, tmp_path, job_id)
    assert proc.wait(timeout=240) == 0, (tmp_path / "run.log").read_text()[-4000:]
    check(job_result(service, job_id), expected_from_log(tmp_path / "truth.jsonl"))


def test_nothing_is_lost_when_the_service_is_down_for_the_first_30_seconds(
        service, tmp_path: Path):
    job_id = f"it-down-{uuid.uuid4().hex[:8]}"
    service.stop()
    try:
        started = time.monotonic()
        proc = launch(service, tmp_path, job_id)
        time.sleep(max(0.0, 30 - (time.monotonic() - started)))
    finally:
        service.start()
    assert proc.wait(timeout=240) == 0, (tmp_path / "run.log").read_text()[-4000:]
    check(job_result(service, job_id), expected_from_log(tmp_path / "truth.jsonl"))
    assert not list((tmp_path / "spool").glob("ett-*.jsonl"))  # every spooled event was sent
