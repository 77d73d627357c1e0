"""A real one-node Slurm (slurmctld, slurmd, munge, slurmdbd on MariaDB) with the adapter's
hooks, a real trainer using the SDK against `ett serve`: every attempt's held time is
Slurm's own record to the second.

Four jobs run at once in one cluster (about two minutes, most of it the time limit):
- `requeue`: requeued while it trains (`scontrol requeue`), then finishes: two attempts;
- `cancel`: cancelled while it trains (`scancel`): cancelled, not an interruption;
- `timeout`: exceeds `--time=1`: an infra failure;
- `silent`: hangs (no more heartbeats), then is killed with `kill -9`: its silent tail is
  `unreported` up to Slurm's End.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from service.access import tokens
from service.slurm.sacct import FIELDS, parse

REPO = Path(__file__).resolve().parents[2]
CLUSTER = "ettci"
pytestmark = pytest.mark.slow

_NEEDED = ("slurmctld", "slurmd", "slurmdbd", "sbatch", "sacct", "munged", "mariadbd")


def _missing() -> list[str]:
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return [p for p in _NEEDED if shutil.which(p, path=path) is None]


@pytest.fixture
def cluster(service_factory, tmp_path_factory) -> Iterator[dict]:
    if _missing() or os.geteuid() != 0:
        pytest.skip(f"needs root and Slurm (scripts/install-slurm.sh); missing: {_missing()}")
    service = service_factory()
    engine = create_engine(service.database_url.replace("postgresql://",
                                                        "postgresql+psycopg://", 1))
    with engine.begin() as conn:
        _a, adapter = tokens.create_token(conn, "adapter")
        _w, writer = tokens.create_token(conn, "writer", "ci", ("slurm-ci*",))
    base = tmp_path_factory.mktemp("slurm")
    (base / "bin").mkdir()
    (base / "marks").mkdir()
    (base / "adapter.token").write_text(adapter)
    conf = base / "etc" / "slurm.conf"
    for kind in ("prolog", "epilog"):
        hook = base / "bin" / f"ett-{kind}"
        # slurmctld gives its hooks no PATH: the wrapper says where everything is.
        hook.write_text(
            "#!/bin/sh\n"
            f"export ETT_URL={service.url} ETT_TOKEN_FILE={base}/adapter.token"
            f" ETT_SLURM_SPOOL_DIR={base}/spool-ett SLURM_CONF={conf}"
            f" PYTHONPATH={os.environ.get('PYTHONPATH', '')}\n"
            f"exec {sys.executable} -m service.cli slurm {kind} 2>>{base}/hooks.log\n")
        hook.chmod(0o755)
    env = {**os.environ, "SLURM_CONF": str(conf), "CLUSTER": CLUSTER,
           "PROLOG": str(base / "bin" / "ett-prolog"), "EPILOG": str(base / "bin" / "ett-epilog")}
    started = time.monotonic()
    subprocess.run([str(REPO / "scripts" / "slurm-one-node.sh"), "start", str(base)], env=env,
                   check=True, timeout=180)
    print(f"cluster up in {time.monotonic() - started:.1f} s")
    try:
        yield {"base": base, "env": env, "service": service, "writer": writer,
               "adapter": adapter, "engine": engine}
    finally:
        subprocess.run([str(REPO / "scripts" / "slurm-one-node.sh"), "stop", str(base)],
                       env=env, timeout=120, check=False)
        engine.dispose()


def wait_for(what: str, check: Callable[[], object], timeout_s: float = 120) -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def slurm(env: dict, *args: str) -> str:
    return subprocess.run(list(args), env={**env, "SLURM_TIME_FORMAT": "%s"}, check=True,
                          capture_output=True, text=True, timeout=30).stdout


def sbatch(c: dict, name: str, *args: str, extra: tuple[str, ...] = ()) -> str:
    marks = c["base"] / "marks"
    env = {**c["env"], "ETT_URL": c["service"].url, "ETT_TOKEN": c["writer"], "ETT_TEAM": "ci",
           "ETT_SPOOL_DIR": str(c["base"] / "spool-sdk")}
    out = slurm(env, "sbatch", "--parsable", "-J", "slurm-ci", "-o",
                str(c["base"] / f"{name}-%j.out"), "--comment", "ett:model=slurm-ci;team=ci",
                *extra, "--wrap",
                f"exec {sys.executable} {REPO}/tests/slurm/trainer.py {marks} {' '.join(args)}")
    return out.strip().split(";")[0]


def sacct_runs(env: dict, job: str):
    runs, problems = parse(slurm(env, "sacct", "-a", "-D", "-X", "-P", "-n", "-j", job, "-o",
                                 ",".join(FIELDS)), CLUSTER)
    assert not problems
    return runs


def ended(env: dict, job: str) -> bool:
    rows = slurm(env, "sacct", "-a", "-X", "-n", "-P", "-j", job, "-o", "State").splitlines()
    return bool(rows) and rows[-1].split(" ")[0] in ("COMPLETED", "CANCELLED", "TIMEOUT",
                                                     "FAILED")


def seconds(ts: str) -> float:
    return datetime.fromisoformat(ts).timestamp()


def test_held_time_is_slurms_record(cluster) -> None:
    c, env, marks = cluster, cluster["env"], cluster["base"] / "marks"
    t0 = time.monotonic()
    jobs = {"requeue": sbatch(c, "requeue", "15"),
            "cancel": sbatch(c, "cancel", "-1"),
            "timeout": sbatch(c, "timeout", "-1", extra=("--time=1",)),
            "silent": sbatch(c, "silent", "-1", "4")}
    training = lambda job, attempt=0: (marks / f"{job}.{attempt}.training").exists()  # noqa: E731
    wait_for("the requeue job training", lambda: training(jobs["requeue"]))
    time.sleep(3)
    slurm(env, "scontrol", "requeue", jobs["requeue"])
    wait_for("the cancel job training", lambda: training(jobs["cancel"]))
    time.sleep(3)
    slurm(env, "scancel", jobs["cancel"])
    hung = wait_for("the silent job hanging", lambda: (marks / f"{jobs['silent']}.hung").exists()
                    and (marks / f"{jobs['silent']}.hung").read_text())
    time.sleep(5)
    os.kill(int(hung), signal.SIGKILL)  # the trainer's own pid, from its mark
    wait_for("the requeued run training", lambda: training(jobs["requeue"], 1), 90)
    for name, job in jobs.items():
        wait_for(f"{name} to end in sacct", lambda job=job: ended(env, job), 150)
    print(f"jobs done in {time.monotonic() - t0:.1f} s")

    # EpilogSlurmctld runs once the job's processes are gone, after sacct has the state.
    def releases(job: str) -> int:
        with c["engine"].connect() as conn:
            return conn.execute(text(
                "SELECT count(*) FROM events WHERE job_id = :j AND type = 'released'"
                " AND attrs->>'source' = 'scheduler'"), {"j": f"slurm:{CLUSTER}:{job}"}
            ).scalar_one()
    for name, job in jobs.items():
        runs = len(sacct_runs(env, job))
        wait_for(f"{name}'s epilogs", lambda job=job, runs=runs: releases(job) == runs, 60)

    # The reconciler after the hooks changes nothing, however often it runs.
    def count() -> set:
        with c["engine"].connect() as conn:
            return {tuple(r) for r in conn.execute(text(
                "SELECT job_id, attempt, type, ts, attrs::text FROM events"
                " WHERE attrs->>'source' = 'scheduler'"))}
    def hooks_log() -> str:
        path = c["base"] / "hooks.log"
        return path.read_text() if path.exists() else ""
    before = count()
    sync_env = {**env, "ETT_URL": c["service"].url, "ETT_TOKEN": c["adapter"]}
    for _ in range(2):
        sync = subprocess.run([sys.executable, "-m", "service.cli", "slurm", "sync", "--jobs",
                               ",".join(jobs.values()), "--cluster", CLUSTER], env=sync_env,
                              capture_output=True, text=True, timeout=60, cwd=REPO)
        assert sync.returncode == 0, sync.stderr
    assert count() == before, (f"the sync found what the hooks had missed: {count() - before}",
                               hooks_log())
    assert "unreachable" not in hooks_log() and "rejected" not in hooks_log(), hooks_log()

    admin = c["service"].headers()
    assert httpx.post(f"{c['service'].url}/v1/aggregate", headers=admin, timeout=60).is_success
    report = []
    for name, job in jobs.items():
        doc = httpx.get(f"{c['service'].url}/v1/jobs/slurm:{CLUSTER}:{job}", headers=admin,
                        timeout=30).json()
        runs = sacct_runs(env, job)
        assert len(doc["attempts"]) == len(runs), (name, doc)
        for attempt, run in zip(doc["attempts"], runs, strict=True):
            held = run.end_s - run.start_s
            report.append(f"{name} (job {job}) attempt {attempt['attempt']}: sacct {run.state}"
                          f" Start-End {held} s, service held {attempt['held_seconds']} s,"
                          f" queue {attempt['queue_seconds']} s")
            assert attempt["held_seconds"] == held, (name, attempt, run)
            assert seconds(attempt["allocated_at"]) == run.start_s
            assert seconds(attempt["released_at"]) == run.end_s
            assert attempt["queue_seconds"] == run.start_s - run.queued_s
            assert attempt["held_by"] == "scheduler" and attempt["gpus"] == 8
            assert attempt["instrumented"]
        # Before the trainer's first event: hardware_setup, exactly.
        setup = sum(seconds(a["trainer_first_at"]) - seconds(a["allocated_at"])
                    for a in doc["attempts"])
        assert doc["phases"]["hardware_setup"] == pytest.approx(setup, abs=1e-6)
        assert doc["phases"]["hardware_setup"] > 0
        assert sum(doc["components"].values()) == pytest.approx(doc["held_seconds"], abs=1e-5)
        report.append(f"{name}: state {doc['state']}, components "
                      + ", ".join(f"{k} {v:.3f}" for k, v in doc["components"].items() if v)
                      + "; phases " + ", ".join(f"{k} {v:.3f}" for k, v in doc["phases"].items()))
        if name == "requeue":
            assert [a["end_cause"] for a in doc["attempts"]] == ["preemption", "completed"]
            assert doc["level1"]["nof_by_cause"]["preemption"] == 1
        elif name == "cancel":
            assert doc["state"] == "cancelled" and doc["level1"]["nof"] == 0
        elif name == "timeout":
            assert doc["state"] == "infra" and runs[0].state == "TIMEOUT"
        else:
            (only,) = doc["attempts"]
            tail = runs[0].end_s - seconds(only["trainer_last_at"])
            assert doc["state"] == "infra" and runs[0].state == "FAILED"
            assert doc["phases"]["unreported"] == pytest.approx(tail, abs=1e-6)
            assert tail >= 4  # the hang, then the kill
    print("\n".join(report))
    (Path(os.environ.get("ETT_SLURM_REPORT", c["base"] / "report.txt"))).write_text(
        "\n".join(report) + "\n")
