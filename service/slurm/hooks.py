"""PrologSlurmctld and EpilogSlurmctld: the allocation and the release, from the hook's
environment (docs/slurm.md).

slurmctld gives the hooks the job's identity and names (SLURM_JOB_ID, SLURM_CLUSTER_NAME,
SLURM_JOB_RESTART_COUNT, ...) but no times and no state: those come from `scontrol show job`
(prolog) and `sacct` (epilog), which already hold them when the hooks run. Without them the
hook falls back to its own clock; `ett slurm sync` later sends Slurm's record under the same
event ids, which the service keeps only if the hook's never arrived.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from . import sacct
from .identity import gpus_of, mapping
from .poster import Target, deliver
from .runs import Run, allocated, ended, events_of

_PAIR = re.compile(r"(\w+)=(\S*)")


class MalformedEnvironment(ValueError):
    """The hook's environment lacks what a job's identity needs."""


def _identity(env: Mapping[str, str]) -> tuple[str, str, int]:
    job = env.get("SLURM_JOB_ID", "").strip()
    cluster = env.get("SLURM_CLUSTER_NAME", "").strip()
    restarts = env.get("SLURM_JOB_RESTART_COUNT", "0").strip() or "0"
    if not job.isdigit():
        raise MalformedEnvironment(f"SLURM_JOB_ID={job!r} is not a job id")
    if not cluster:
        raise MalformedEnvironment("SLURM_CLUSTER_NAME is not set")
    if not restarts.isdigit():
        raise MalformedEnvironment(f"SLURM_JOB_RESTART_COUNT={restarts!r} is not a count")
    return cluster, job, int(restarts)


def _scontrol(job: str) -> dict[str, str]:
    try:
        out = sacct.run_program(["scontrol", "show", "job", "-o", job], timeout_s=5)
    except (sacct.SlurmMissing, RuntimeError, OSError, TimeoutError) as exc:
        raise LookupError(str(exc)) from None
    return dict(_PAIR.findall(out))


def prolog_events(env: Mapping[str, str], default_gpus: int, now_s: int,
                  log: Callable[[str], None]) -> list[dict[str, Any]]:
    cluster, job, restarts = _identity(env)
    names = mapping(env.get("SLURM_JOB_COMMENT"), env.get("SLURM_JOB_NAME"),
                    env.get("SLURM_JOB_ACCOUNT"))
    try:
        record = _scontrol(job)
    except LookupError as exc:
        log(f"scontrol unavailable ({exc}); using the hook's clock for job {job}")
        record = {}
    start = _epoch(record.get("StartTime")) or now_s
    queued = _epoch(record.get("EligibleTime")) or _epoch(record.get("SubmitTime"))
    run = Run(cluster=cluster, slurm_job_id=job, attempt=restarts, mapping=names,
              start_s=start, end_s=None, queued_s=queued, state=None, exit_code=None,
              gpus=gpus_of(record.get("TRES")))
    return [allocated(run, default_gpus)]


def epilog_events(env: Mapping[str, str], default_gpus: int, now_s: int,
                  log: Callable[[str], None]) -> list[dict[str, Any]]:
    cluster, job, restarts = _identity(env)
    names = mapping(env.get("SLURM_JOB_COMMENT"), env.get("SLURM_JOB_NAME"),
                    env.get("SLURM_JOB_ACCOUNT"))
    try:
        runs, problems = sacct.parse(sacct.read_jobs([job], timeout_s=10), cluster)
        for problem in problems:
            log(f"sacct row {problem.line} skipped ({problem.error})")
    except (sacct.SlurmMissing, RuntimeError, OSError, TimeoutError) as exc:
        log(f"sacct unavailable ({exc}); the release of job {job} uses the hook's clock")
        runs = []
    # The run that just ended is the latest with an end: after a requeue the restart count
    # in this environment already names the next run.
    done = [r for r in runs if r.end_s is not None]
    if done:
        run = done[-1]
        run = Run(cluster, job, run.attempt, names, run.start_s, run.end_s, run.queued_s,
                  run.state, run.exit_code, run.gpus)
        return events_of(run, default_gpus)
    return _epilog_without_sacct(env, cluster, job, restarts, names, now_s, log)


def _epilog_without_sacct(env: Mapping[str, str], cluster: str, job: str, restarts: int,
                          names: Any, now_s: int, log: Callable[[str], None]
                          ) -> list[dict[str, Any]]:
    exit_code = env.get("SLURM_JOB_EXIT_CODE2", "").strip() or None
    try:
        record = _scontrol(job)
    except LookupError as exc:
        log(f"scontrol unavailable ({exc}); job {job}'s state guessed from its exit code")
        record = {}
    state = record.get("JobState") or ("COMPLETED" if exit_code in (None, "0:0") else "FAILED")
    attempt = restarts
    if state in ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED") and restarts > 0:
        # Requeued: this environment already counts the next run.
        state, attempt = "REQUEUED", restarts - 1
    end = _epoch(record.get("EndTime")) or now_s
    start = _epoch(record.get("StartTime")) or end
    run = Run(cluster, job, attempt, names, min(start, end), end, None, state, exit_code, None)
    return ended(run)


def _epoch(value: str | None) -> int | None:
    try:
        return sacct.epoch(value or "")
    except ValueError:
        return None


def run_hook(kind: str, env: Mapping[str, str], target: Target,
             log: Callable[[str], None]) -> None:
    """Never raises: the job must not fail because its telemetry did."""
    build = prolog_events if kind == "prolog" else epilog_events
    try:
        events = build(env, target.default_gpus, int(time.time()), log)
    except MalformedEnvironment as exc:
        log(f"{kind}: malformed environment, nothing sent: {exc}")
        return
    if events:
        deliver(target, events, log)
