"""A trainer simulated the way checkpoint advice models it, as wire events.

Each job trains `work_s` seconds, saving every `tau_s` seconds of training (the save blocks
for `d_s`, and its snapshot is the save's start); interruptions arrive as a Poisson
process over held time at rate 1 / `mtbf_s`; after one the attempt holds its GPUs for
`post_s`, the next attempt is allocated `gap_s` later and starts up for `startup_s`
before training resumes from the latest durable snapshot. So the true restart cost
besides lost progress is R = post_s + startup_s.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

US = 1_000_000


@dataclass(frozen=True)
class Trainer:
    tau_s: float
    d_s: float
    post_s: float
    startup_s: float
    mtbf_s: float
    gap_s: float = 60.0
    gpus: int = 8

    @property
    def restart_s(self) -> float:
        return self.post_s + self.startup_s


@dataclass
class Truth:
    """What actually happened, summed by the simulator itself."""

    held_us: int = 0
    interruptions: int = 0
    effective_us: int = 0
    lost_us: int = 0
    durable: int = 0
    attempts: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)


def _ts(us: int) -> str:
    return (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=us)).isoformat().replace(
        "+00:00", "Z")


def simulate_job(rng: random.Random, trainer: Trainer, job_id: str, model: str,
                 start: datetime, work_s: float, truth: Truth) -> int:
    """Append one job's events to `truth.events`; return the instant (us) it ended."""
    t = int((start - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds() * US)
    tau, d = round(trainer.tau_s * US), round(trainer.d_s * US)
    post, startup = round(trainer.post_s * US), round(trainer.startup_s * US)
    work, durable_work, attempt = round(work_s * US), 0, 0

    def emit(kind: str, at: int, **fields: Any) -> None:
        truth.events.append({"event_id": str(uuid.uuid4()), "ts": _ts(at), "job_id": job_id,
                             "attempt": attempt, "model": model, "type": kind, **fields})

    while True:
        truth.attempts += 1
        begin = t
        fail_at = begin + round(rng.expovariate(1.0 / trainer.mtbf_s) * US)
        emit("allocated", t, gpus=trainer.gpus, team="ckpt-team")
        # Training resumes from the latest durable snapshot; a first start needs no restore.
        steps: list[tuple[str, int]] = [("startup", startup)] if attempt else []
        left = work - durable_work
        while left > 0:
            steps.append(("train", min(tau, left)))
            left -= tau
            if left > 0:
                steps.append(("save", d))
        progress, failed, training_open = durable_work, False, False
        for kind, length in steps:
            end = t + length
            if kind == "startup":
                emit("phase_start", t, phase="launcher_init")
            elif kind == "train" and not training_open:
                emit("phase_start", t, phase="training")
                training_open = True
            elif kind == "save":
                emit("phase_start", t, phase="checkpoint_save")
            if fail_at < end:
                # Lost: the training since the latest durable snapshot, this step's included.
                truth.lost_us += progress - durable_work + (fail_at - t if kind == "train" else 0)
                t, failed = fail_at, True
                break
            t = end
            if kind == "startup":
                emit("phase_end", t, phase="launcher_init")
            elif kind == "train":
                progress += length
            else:
                emit("phase_end", t, phase="checkpoint_save")
                emit("checkpoint", t, attrs={"step": progress // US})
                durable_work = progress
                truth.durable += 1
        if failed:
            emit("failure", t, attrs={"cause": "infra", "reason": "simulated"})
            t += post
            emit("released", t, attrs={"reason": "failed"})
            truth.held_us += t - begin
            truth.interruptions += 1
            t += round(trainer.gap_s * US)
            attempt += 1
            continue
        emit("phase_end", t, phase="training")
        emit("released", t, attrs={"reason": "completed"})
        truth.held_us += t - begin
        truth.effective_us += work
        return t
