"""The Slurm adapter without Slurm: the mapping, sacct rows, state outcomes, and the hooks'
promises (never fail the job, spool when the service is away, idempotent ids) against a
real `ett serve`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from service.access import tokens
from service.slurm.identity import event_id, gpus_of, mapping
from service.slurm.runs import events_of
from service.slurm.sacct import FIELDS, parse
from service.slurm.states import outcome

REPO = Path(__file__).resolve().parents[2]


def test_the_mapping_prefers_the_comment_then_the_job_name_and_account() -> None:
    assert mapping("ett:model=llama-70b;team=llm", "train", "ops") == (
        mapping("x ett:model=llama-70b;team=llm y", "other", None))
    m = mapping("ett:model=llama-70b;team=llm", "train", "ops")
    assert (m.model, m.team, m.source) == ("llama-70b", "llm", "comment")
    m = mapping(None, "my job!", "ops")
    assert (m.model, m.team, m.source) == ("my_job_", "ops", "job_name")
    m = mapping("ett:team=vision", "", "")
    assert (m.model, m.team, m.source) == ("slurm-unnamed", "vision", "default")


def test_gpus_come_from_the_tres_and_ids_are_deterministic() -> None:
    assert gpus_of("billing=1,cpu=1,gres/gpu=8,mem=1G,node=1") == 8
    assert gpus_of("cpu=2,gres/gpu:a100=4,gres/gpu:h100=2") == 6
    assert gpus_of("billing=1,cpu=1,node=1") is None
    assert event_id("slurm:c:1", 0, "allocated") == event_id("slurm:c:1", 0, "allocated")
    assert event_id("slurm:c:1", 0, "allocated") != event_id("slurm:c:1", 1, "allocated")


@pytest.mark.parametrize(("state", "reason", "cause"), [
    ("COMPLETED", "completed", None), ("CANCELLED by 0", "cancelled", None),
    ("FAILED", "failed", None), ("TIMEOUT", "failed", "infra"),
    ("NODE_FAIL", "failed", "infra"), ("PREEMPTED", "preempted", "preemption"),
    ("REQUEUED", "preempted", "preemption"), ("OUT_OF_MEMORY", "failed", "user")])
def test_each_ended_state_has_an_outcome(state, reason, cause) -> None:
    got = outcome(state)
    assert got is not None and (got.reason, got.cause) == (reason, cause)
    assert outcome("RUNNING") is None and outcome("PENDING") is None


def row(job="7", state="COMPLETED", start="1000", end="1600", submit="900", eligible="950",
        comment="ett:model=m;team=t", tres="billing=1,cpu=1,node=1") -> str:
    values = dict(JobIDRaw=job, Cluster="c", JobName="train", Account="acct", State=state,
                  ExitCode="0:0", Submit=submit, Eligible=eligible, Start=start, End=end,
                  AllocTRES=tres, Comment=comment)
    return "|".join(values[f] for f in FIELDS)


def test_sacct_rows_become_runs_one_attempt_per_requeue_and_bad_rows_are_reported() -> None:
    output = "\n".join([
        row(state="REQUEUED", start="1000", end="1100"),
        row(state="COMPLETED", start="1200", end="1900", submit="1100", eligible="1110"),
        row(job="8", state="PENDING", start="Unknown", end="Unknown"),
        "garbage line",
        row(job="9", start="yesterday"),
        row(job="10", comment="ett:model=x|with a pipe"),
    ])
    runs, problems = parse(output, "default")
    assert [(r.slurm_job_id, r.attempt, r.start_s, r.end_s, r.queued_s) for r in runs] == [
        ("7", 0, 1000, 1100, 950), ("7", 1, 1200, 1900, 1110), ("10", 0, 1000, 1600, 950)]
    assert [p.line for p in problems] == [4, 5]
    assert "invalid literal" in problems[1].error
    requeued = events_of(runs[0], default_gpus=2)
    assert [e["type"] for e in requeued] == ["allocated", "failure", "released"]
    assert requeued[0]["gpus"] == 2 and requeued[0]["attrs"]["gpus_assumed"] is True
    assert requeued[0]["attrs"]["queued_at"] == "1970-01-01T00:15:50Z"
    assert requeued[1]["attrs"]["cause"] == "preemption"
    assert requeued[2]["attrs"] == {"source": "scheduler", "state": "REQUEUED",
                                    "exit_code": "0:0", "reason": "preempted"}
    assert runs[0].job_id == "slurm:c:7" and requeued[0]["model"] == "m"


def ett(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}  # slurmctld gives no PATH
    return subprocess.run([sys.executable, "-m", "service.cli", *args], env={**base, **env},
                          capture_output=True, text=True, timeout=60, cwd=REPO, check=False)


def test_a_hook_with_a_malformed_environment_logs_one_line_and_exits_0(tmp_path) -> None:
    done = ett(["slurm", "prolog"], {"ETT_URL": "http://127.0.0.1:9", "ETT_TOKEN": "t",
                                     "SLURM_JOB_ID": "abc", "SLURM_CLUSTER_NAME": "c"})
    assert done.returncode == 0
    assert done.stderr.splitlines() == [
        "ett slurm prolog: prolog: malformed environment, nothing sent:"
        " SLURM_JOB_ID='abc' is not a job id"]
    unconfigured = ett(["slurm", "epilog"], {"SLURM_JOB_ID": "1"})
    assert unconfigured.returncode == 0 and len(unconfigured.stderr.splitlines()) == 1


def test_sync_without_sacct_is_one_clear_line(tmp_path) -> None:
    done = ett(["slurm", "sync"], {"ETT_URL": "http://127.0.0.1:9", "ETT_TOKEN": "t",
                                   "ETT_SLURM_BIN_DIR": str(tmp_path)})
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"ett slurm sync: sacct: not found in {tmp_path}; install Slurm's client programs"
        " or set ETT_SLURM_BIN_DIR (docs/slurm.md)"]


@pytest.mark.slow
def test_an_unreachable_service_spools_and_the_next_hook_delivers_once(service,
                                                                       tmp_path) -> None:
    engine = create_engine(service.database_url.replace("postgresql://",
                                                        "postgresql+psycopg://", 1))
    with engine.begin() as conn:
        _info, secret = tokens.create_token(conn, "adapter")
    # No scontrol here (an empty bin dir): the hooks fall back to their own clock.
    hook_env = {"ETT_TOKEN": secret, "ETT_SLURM_SPOOL_DIR": str(tmp_path / "spool"),
                "ETT_SLURM_BIN_DIR": str(tmp_path), "SLURM_JOB_ID": "41",
                "SLURM_CLUSTER_NAME": "unit", "SLURM_JOB_NAME": "train",
                "SLURM_JOB_RESTART_COUNT": "0"}
    away = ett(["slurm", "prolog"], {**hook_env, "ETT_URL": "http://127.0.0.1:9"})
    assert away.returncode == 0 and "spooled 1 events" in away.stderr
    assert len(list((tmp_path / "spool").glob("*.json"))) == 1
    # The epilog flushes the spool first, then posts its own release. (Without scontrol or
    # sacct its instant is its own clock, so a second epilog would be a second observation
    # at another instant, not a retry: event ids are duplicates only at the same instant.)
    back = ett(["slurm", "epilog"], {**hook_env, "ETT_URL": service.url,
                                     "SLURM_JOB_EXIT_CODE2": "0:0"})
    assert back.returncode == 0, back.stderr
    assert list((tmp_path / "spool").glob("*.json")) == []
    with engine.connect() as conn:
        stored = conn.execute(text(
            "SELECT type, attempt, attrs->>'source' FROM events WHERE job_id = 'slurm:unit:41'"
            " ORDER BY type")).all()
    engine.dispose()
    assert [tuple(r) for r in stored] == [("allocated", 0, "scheduler"),
                                          ("released", 0, "scheduler")]
