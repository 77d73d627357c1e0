"""End to end: a real PyTorch job under torchelastic, killed and restarted, measured by the
real service, compared with what the job logged with its own clock.

`examples/train_elastic.py` runs on 2 CPU workers (gloo) with torch.compile and async DCP
checkpoints; in its first attempt worker 1 SIGKILLs itself, torchelastic restarts both, the
job resumes from its last durable checkpoint and completes. Rank 0 writes a ground-truth log.
"""

from __future__ import annotations

import itertools
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

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
TORCHRUN = Path(sys.executable).with_name("torchrun")
COMPONENT = {  # docs/model.md section 2, the default taxonomy, for the phases the example reports
    "process_group_init": "initialization", "checkpoint_load": "initialization",
    "compilation": "compilation", "training": "effective_training",
    "checkpoint_save": "wasted_training", "final_checkpoint": "shutdown", "teardown": "shutdown",
}
COMPONENTS = ("scheduling", "initialization", "compilation", "effective_training",
              "wasted_training", "shutdown", "unattributed")


def launch(service: Any, tmp: Path, job_id: str, **extra: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "ETT_URL": service.url, "ETT_TOKEN": service.token,
           "ETT_JOB_ID": job_id, "ETT_MODEL": "tiny-mlp", "ETT_TEAM": "research",
           "ETT_SPOOL_DIR": str(tmp / "spool"), "ETT_SIGTERM_CAUSE": "infra",
           "PYTHONPATH": str(REPO), **extra}
    for name in ("RANK", "WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT", "ETT_STRICT"):
        env.pop(name, None)
    cmd = [str(TORCHRUN), "--standalone", "--nnodes=1", "--nproc-per-node=2", "--max-restarts=2",
           str(REPO / "examples" / "train_elastic.py"), "--ckpt-dir", str(tmp / "ckpt"),
           "--crash-rank", "1", "--crash-step", "25", "--steps", "60", "--truth",
           str(tmp / "truth.jsonl"), "--close-timeout-s", "90", "--backoff-max-s", "2"]
    return subprocess.Popen(cmd, env=env, stdout=(tmp / "run.log").open("wb"),
                            stderr=subprocess.STDOUT)


def expected_from_truth(path: Path) -> dict[str, Any]:
    """The job's numbers from its own log: innermost open phase owns each instant (docs/model.md
    section 2), training since the last durable snapshot before a failure is lost progress
    (section 4)."""
    facts = [json.loads(line) for line in path.read_text().splitlines()]
    attempts = sorted({f["attempt"] for f in facts})
    alloc = {k: next(f["t"] for f in facts if f["attempt"] == k and f["what"] == "allocated")
             for k in attempts}
    comps = dict.fromkeys(COMPONENTS, 0.0)
    held = lost = 0.0
    causes = []
    for k in attempts:
        mine = [f for f in facts if f["attempt"] == k]
        fail = next((f["t"] for f in mine if f["what"] == "failure"), None)
        released = next((f["t"] for f in mine if f["what"] == "released"), None)
        # Without a release, an attempt ends where the next one starts (model.md section 5).
        end = released if released is not None else alloc[k + 1]
        held += end - alloc[k]
        if fail is not None:
            causes.append("infra")
        bounds = sorted({alloc[k], end, *(f["t"] for f in mine if f["what"] in ("start", "end"))})
        stack: list[str] = []
        marks = sorted((f["t"], 0 if f["what"] == "end" else 1, f) for f in mine
                       if f["what"] in ("start", "end"))
        owner_at = []  # (t0, t1, phase or None)
        i = 0
        for t0, t1 in itertools.pairwise(bounds):
            while i < len(marks) and marks[i][0] <= t0:
                f = marks[i][2]
                if f["what"] == "start":
                    stack.append(f["phase"])
                else:
                    stack.reverse()
                    stack.remove(f["phase"])
                    stack.reverse()
                i += 1
            phase = stack[-1] if stack and (fail is None or t0 < fail) else None
            owner_at.append((t0, t1, phase))
        for t0, t1, phase in owner_at:
            comps[COMPONENT[phase] if phase else "unattributed"] += t1 - t0
        if fail is not None:
            snaps = [f["snapshot"] for f in mine if f["what"] == "checkpoint" and f["t"] <= fail]
            since = max(snaps) if snaps else alloc[k]
            lost += sum(min(t1, fail) - max(t0, since) for t0, t1, p in owner_at
                        if p == "training" and min(t1, fail) > max(t0, since))
    comps["effective_training"] -= lost
    comps["wasted_training"] += lost
    return {"held": held, "components": comps, "lost": lost, "causes": causes,
            "attempts": len(attempts)}


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
    check(job_result(service, job_id), expected_from_truth(tmp_path / "truth.jsonl"))


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
    check(job_result(service, job_id), expected_from_truth(tmp_path / "truth.jsonl"))
    assert not list((tmp_path / "spool").glob("ett-*.jsonl"))  # every spooled event was sent
