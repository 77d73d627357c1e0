"""One Slurm run (one allocation of a job: a requeue starts another) as scheduler events."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .identity import Mapping, event_id, job_id_of
from .states import outcome

SOURCE = {"source": "scheduler"}


@dataclass(frozen=True)
class Run:
    cluster: str
    slurm_job_id: str
    attempt: int
    mapping: Mapping
    start_s: int  # epoch seconds, as Slurm keeps them
    end_s: int | None  # None while the run holds its allocation
    queued_s: int | None  # eligible (else submitted) for this run
    state: str | None
    exit_code: str | None
    gpus: int | None  # from the TRES; None: the node has no GPU resources configured

    @property
    def job_id(self) -> str:
        return job_id_of(self.cluster, self.slurm_job_id)


def _ts(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def _base(run: Run, kind: str, ts_s: int) -> dict[str, Any]:
    event: dict[str, Any] = {
        "event_id": event_id(run.job_id, run.attempt, kind), "ts": _ts(ts_s),
        "job_id": run.job_id, "attempt": run.attempt, "model": run.mapping.model,
        "type": kind}
    if run.mapping.team:
        event["team"] = run.mapping.team
    return event


def allocated(run: Run, default_gpus: int) -> dict[str, Any]:
    event = _base(run, "allocated", run.start_s)
    attrs: dict[str, Any] = {**SOURCE, "slurm_job_id": run.slurm_job_id,
                             "mapping": run.mapping.source}
    if run.gpus is None:
        # The trainer's own count wins over this fallback (docs/slurm.md, "GPUs").
        event["gpus"], attrs["gpus_assumed"] = default_gpus, True
    else:
        event["gpus"] = run.gpus
    if run.queued_s is not None and run.queued_s <= run.start_s:
        attrs["queued_at"] = _ts(run.queued_s)
    event["attrs"] = attrs
    return event


def ended(run: Run) -> list[dict[str, Any]]:
    """The failure (when the state names one) and the release of an ended run."""
    if run.end_s is None or run.state is None:
        return []
    result = outcome(run.state)
    if result is None:
        return []
    end_s = max(run.end_s, run.start_s)
    attrs: dict[str, Any] = {**SOURCE, "state": run.state[:64]}
    if run.exit_code:
        attrs["exit_code"] = run.exit_code[:64]
    events = []
    if result.cause is not None:
        failure = _base(run, "failure", end_s)
        failure["attrs"] = {**attrs, "cause": result.cause, "reason": run.state[:64]}
        events.append(failure)
    released = _base(run, "released", end_s)
    released["attrs"] = {**attrs, "reason": result.reason}
    events.append(released)
    return events


def events_of(run: Run, default_gpus: int) -> list[dict[str, Any]]:
    return [allocated(run, default_gpus), *ended(run)]
