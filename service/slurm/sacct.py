"""Reading Slurm's accounting: `sacct -D` gives one row per run of a job (requeues included).

Times are asked for as epoch seconds (SLURM_TIME_FORMAT=%s), so no local time zone is ever
guessed. A row that cannot be read is reported on its own and skipped, never a crash.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .identity import gpus_of, mapping
from .runs import Run

# The comment last: it is free text, and a '|' in it stays in the last field.
FIELDS = ("JobIDRaw", "Cluster", "JobName", "Account", "State", "ExitCode", "Submit",
          "Eligible", "Start", "End", "AllocTRES", "Comment")
# Slurm's programs live here on Debian and in most builds; hooks get no PATH at all.
_FALLBACK_PATH = "/usr/bin:/bin:/usr/local/bin:/usr/sbin:/usr/local/sbin"


class SlurmMissing(Exception):
    """A Slurm client program is not installed or not on PATH."""


def program(name: str) -> str:
    """The program's path: in ETT_SLURM_BIN_DIR when set (a site's own Slurm build), else
    on PATH or in the usual places."""
    where = os.environ.get("ETT_SLURM_BIN_DIR")
    search = [where] if where else [os.environ.get("PATH") or _FALLBACK_PATH, _FALLBACK_PATH]
    for path in search:
        found = shutil.which(name, path=path)
        if found is not None:
            return found
    raise SlurmMissing(f"{name}: not found in {where or 'PATH or ' + _FALLBACK_PATH}; install"
                       " Slurm's client programs or set ETT_SLURM_BIN_DIR (docs/slurm.md)")


def run_program(args: list[str], timeout_s: float) -> str:
    env = {**os.environ, "SLURM_TIME_FORMAT": "%s"}
    env.setdefault("PATH", _FALLBACK_PATH)
    done = subprocess.run([program(args[0]), *args[1:]], capture_output=True, text=True,
                          timeout=timeout_s, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{args[0]} exited {done.returncode}: {done.stderr.strip()[-300:]}")
    return done.stdout


def epoch(value: str) -> int | None:
    """Epoch seconds; None for Slurm's 'Unknown', 'None' or an empty field."""
    value = value.strip()
    if not value or value in ("Unknown", "None", "0"):
        return None
    return int(value)  # ValueError: the row is reported


@dataclass(frozen=True)
class RowProblem:
    line: int
    text: str
    error: str


def parse(output: str, cluster_default: str) -> tuple[list[Run], list[RowProblem]]:
    """`sacct -D -X -P -n -o FIELDS` output into runs, attempt = the run's index per job
    (rows come oldest first; a requeue adds a row with the same JobIDRaw)."""
    rows: dict[str, list[tuple[int, list[str]]]] = {}
    problems: list[RowProblem] = []
    for number, line in enumerate(output.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("|", len(FIELDS) - 1)
        if len(fields) != len(FIELDS) or not fields[0].strip().isdigit():
            problems.append(RowProblem(number, line[:200],
                                       f"expected {len(FIELDS)} '|'-separated fields"
                                       f" ({', '.join(FIELDS)}) with a numeric JobIDRaw"))
            continue
        rows.setdefault(fields[0].strip(), []).append((number, fields))
    runs: list[Run] = []
    for job, job_rows in rows.items():
        for attempt, (number, fields) in enumerate(job_rows):
            try:
                runs.append(_run(job, attempt, fields, cluster_default))
            except ValueError as exc:
                problems.append(RowProblem(number, "|".join(fields)[:200], str(exc)))
    return [r for r in runs if r.start_s], problems


def _run(job: str, attempt: int, fields: list[str], cluster_default: str) -> Run:
    (_raw, cluster, name, account, state, exit_code, submit, eligible, start, end, tres,
     comment) = fields
    start_s = epoch(start)
    end_s = epoch(end)
    queued = epoch(eligible) or epoch(submit)
    return Run(
        cluster=cluster.strip() or cluster_default, slurm_job_id=job, attempt=attempt,
        mapping=mapping(comment, name, account), start_s=start_s or 0,
        end_s=end_s if start_s else None, queued_s=queued, state=state.strip() or None,
        exit_code=exit_code.strip() or None, gpus=gpus_of(tres))


def read_jobs(job_ids: Iterable[str], timeout_s: float = 60) -> str:
    """Every run of these jobs, whatever their age (with -j, sacct has no time window)."""
    ids = ",".join(job_ids)
    return run_program(["sacct", "-a", "-D", "-X", "-P", "-n", "-j", ids,
                        "-o", ",".join(FIELDS)], timeout_s)


def jobs_since(since: str, until: str, timeout_s: float = 60) -> list[str]:
    """Job ids with a run in [since, until] (sacct's -S/-E syntax, e.g. now-1days)."""
    out = run_program(["sacct", "-a", "-X", "-P", "-n", "-S", since, "-E", until,
                       "-o", "JobIDRaw"], timeout_s)
    return list(dict.fromkeys(x.strip() for x in out.splitlines() if x.strip().isdigit()))


def reconcile_runs(job_ids: list[str], cluster_default: str, log: Callable[[str], None],
                   chunk: int = 200) -> list[Run]:
    runs: list[Run] = []
    for i in range(0, len(job_ids), chunk):
        found, problems = parse(read_jobs(job_ids[i:i + chunk]), cluster_default)
        for problem in problems:
            log(f"sacct row {problem.line} skipped ({problem.error}): {problem.text}")
        runs.extend(found)
    return runs
