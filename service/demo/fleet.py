"""A simulated training fleet: deterministic event streams for `ett demo`.

Pure generation (no I/O): each model runs data-window jobs back to back; each job runs
attempts until its training target is reached, with start-up phases, recompiles, data
stalls, async checkpoints, failures (infra, user, preemption), the odd lost attempt and
the odd instrumentation gap. Regressions multiply one component's phase durations for
chosen teams, so alerts and dashboards have something to find.
"""

from __future__ import annotations

import heapq
import random
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

TEAMS = ("ads", "feed", "search", "reels", "ranking", "integrity")
MODEL_KINDS = ("ctr", "cvr", "retrieval", "ranker", "dedup", "embed", "mtml", "seq")
GPU_CHOICES = (8, 16, 32, 64, 128, 256, 512)
COMPONENT_PHASES = {
    "scheduling": ("scheduling",),
    "initialization": ("launcher_init", "device_init", "process_group_init", "checkpoint_load",
                       "train_module_creation", "get_first_batch_data"),
    "compilation": ("compilation",),
    "wasted_training": ("checkpoint_save", "data_stall"),
    "shutdown": ("final_checkpoint", "model_publish", "teardown"),
}
HEARTBEAT_S = 300.0
# Checkpoint habits differ between models, so checkpoint advice differs between them:
# training seconds between saves, and a save's mean blocking time as a share of that
# interval. The shares stay under 1%, as a healthy fleet's do: the demo also drives the
# alerting tests, where the checkpointing team's wasted-training SLO (3%) must hold.
CHECKPOINT_EVERY_S = (900.0, 2700.0, 5400.0, 1800.0, 10800.0)
CHECKPOINT_SAVE_SHARE = (0.003, 0.009, 0.006)


def checkpoint_save_s(every_s: float, share: float) -> tuple[float, float]:
    """(low, high) blocking seconds of one save: uniform around `share` of the interval."""
    return (every_s * share * 0.5, every_s * share * 1.5)


@dataclass(frozen=True)
class Regression:
    component: str
    factor: float
    team: str | None = None  # None: every team

    @classmethod
    def parse(cls, text: str) -> Regression:
        """`compilation=3x` or `compilation=3x:ads`."""
        try:
            component, rest = text.split("=", 1)
            factor_text, _, team = rest.partition(":")
            factor = float(factor_text.rstrip("x"))
        except ValueError:
            raise ValueError(f"--regress {text!r}: expected COMPONENT=FACTORx[:TEAM]") from None
        if component not in COMPONENT_PHASES:
            raise ValueError(f"--regress {text!r}: component must be one of "
                             f"{', '.join(COMPONENT_PHASES)}")
        if factor <= 0:
            raise ValueError(f"--regress {text!r}: factor must be positive")
        return cls(component, factor, team or None)


@dataclass(frozen=True)
class FleetSpec:
    models: int = 24
    seed: int = 7
    regressions: tuple[Regression, ...] = ()
    time_scale: float = 1.0  # >1 shrinks every duration (fast fleets for tests)
    failure_rate_per_hour: float = 0.015  # per job-hour of training


@dataclass(frozen=True)
class DemoModel:
    name: str
    team: str
    gpus: int
    checkpoint_every_s: float = 2700.0
    checkpoint_save_s: tuple[float, float] = (5.0, 30.0)


def fleet_models(spec: FleetSpec) -> list[DemoModel]:
    models = []
    for i in range(spec.models):
        team = TEAMS[i % len(TEAMS)]
        k = i // len(TEAMS)
        kind = MODEL_KINDS[k % len(MODEL_KINDS)]
        # Every team gets the same mix of sizes, so no team dominates the fleet's GPU time.
        gpus = GPU_CHOICES[(3 * k + 1) % len(GPU_CHOICES)]
        every = CHECKPOINT_EVERY_S[i % len(CHECKPOINT_EVERY_S)]
        models.append(DemoModel(f"{team}_{kind}_{i:03d}", team, gpus,
                                checkpoint_every_s=every,
                                checkpoint_save_s=checkpoint_save_s(
                                    every, CHECKPOINT_SAVE_SHARE[i % len(CHECKPOINT_SAVE_SHARE)])))
    return models


@dataclass
class _Emitter:
    model: DemoModel
    rng: random.Random
    out: list[tuple[float, dict[str, Any]]] = field(default_factory=list)

    def emit(self, t: float, job: str, attempt: int, etype: str, **fields: Any) -> None:
        ev = {
            "event_id": str(uuid.UUID(int=self.rng.getrandbits(128), version=4)),
            "ts": datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z"),
            "job_id": job,
            "attempt": attempt,
            "model": self.model.name,
            "type": etype,
            **fields,
        }
        self.out.append((t, ev))


class ModelSimulator:
    """Generates one model's jobs, back to back, from `start` on."""

    def __init__(self, model: DemoModel, spec: FleetSpec, start: float,
                 lifted: Callable[[], bool] = lambda: False) -> None:
        self.model = model
        self.spec = spec
        # Once true, jobs generated from then on run without the regressions (a fix rolled
        # out: jobs already running keep what they started with).
        self.lifted = lifted
        # The regressions' factor by component for the job being generated: fixed when the
        # job starts, so a lift never changes a job half way.
        self.factors: dict[str, float] = {}
        self.t = start
        self.job_no = 0
        self.rng = random.Random(f"{spec.seed}:{model.name}")
        self.em = _Emitter(model, self.rng)

    def _regression_factors(self) -> dict[str, float]:
        factors: dict[str, float] = {}
        for r in self.spec.regressions:
            if r.team is None or r.team == self.model.team:
                factors[r.component] = factors.get(r.component, 1.0) * r.factor
        return factors

    def _factor(self, component: str) -> float:
        return self.factors.get(component, 1.0)

    def _dur(self, lo_s: float, hi_s: float, component: str) -> float:
        return self.rng.uniform(lo_s, hi_s) * self._factor(component) / self.spec.time_scale

    def _phase(self, t: float, job: str, attempt: int, phase: str, dur: float) -> float:
        self.em.emit(t, job, attempt, "phase_start", phase=phase)
        self.em.emit(t + dur, job, attempt, "phase_end", phase=phase)
        return t + dur

    def next_job(self) -> list[tuple[float, dict[str, Any]]]:
        """All events of the next job, in time order; advances the model's clock."""
        self.job_no += 1
        self.factors = {} if self.lifted() else self._regression_factors()
        # The seed is part of the id: two fleets with other seeds never share a job.
        job = f"{self.model.name}-s{self.spec.seed}-w{self.job_no:05d}"
        scale = self.spec.time_scale
        target = self.rng.uniform(1, 12) * 3600 / scale  # training seconds in the window
        done = 0.0  # durable training progress
        attempt = 0
        t = self.t
        while True:
            t, done, finished = self._attempt(job, attempt, t, done, target)
            if finished:
                break
            attempt += 1
            t += self.rng.uniform(60, 600) / scale  # queued, not held
        self.t = t + self.rng.uniform(30, 300) / scale
        events, self.em.out = sorted(self.em.out, key=lambda x: x[0]), []
        return events

    def _attempt(self, job: str, attempt: int, t: float, done: float,
                 target: float) -> tuple[float, float, bool]:
        m, em, rng, scale = self.model, self.em, self.rng, self.spec.time_scale
        em.emit(t, job, attempt, "allocated", gpus=m.gpus, team=m.team)
        t = self._phase(t, job, attempt, "scheduling", self._dur(20, 120, "scheduling"))
        if rng.random() < 0.05:  # an instrumentation gap: held, nothing reported
            t += rng.uniform(60, 600) / scale * self._factor("unattributed")
        # launcher_init with device and process-group init nested inside it
        em.emit(t, job, attempt, "phase_start", phase="launcher_init")
        t += self._dur(10, 30, "initialization")
        t = self._phase(t, job, attempt, "device_init", self._dur(10, 40, "initialization"))
        t = self._phase(t, job, attempt, "process_group_init",
                        self._dur(5, 60, "initialization"))
        em.emit(t, job, attempt, "phase_end", phase="launcher_init")
        if attempt > 0 or done > 0:
            t = self._phase(t, job, attempt, "checkpoint_load", self._dur(60, 180,
                                                                          "initialization"))
        t = self._phase(t, job, attempt, "train_module_creation",
                        self._dur(20, 90, "initialization"))
        t = self._phase(t, job, attempt, "compilation", self._dur(120, 360, "compilation"))
        t = self._phase(t, job, attempt, "get_first_batch_data",
                        self._dur(10, 40, "initialization"))
        return self._train(job, attempt, t, done, target)

    def _train(self, job: str, attempt: int, t: float, done: float,
               target: float) -> tuple[float, float, bool]:
        em, rng, scale = self.em, self.rng, self.spec.time_scale
        em.emit(t, job, attempt, "phase_start", phase="training")
        hazard = self.spec.failure_rate_per_hour * scale / 3600
        ckpt_every = self.model.checkpoint_every_s / scale
        since_ckpt, progress = 0.0, done
        next_beat = t + HEARTBEAT_S / scale
        while progress < target:
            step = min(60 / scale, target - progress)
            if rng.random() < hazard * step:  # an interruption during this step
                return self._fail(job, attempt, t + rng.uniform(0, step), done)
            t += step
            progress += step
            since_ckpt += step
            if t >= next_beat:
                em.emit(t, job, attempt, "heartbeat", attrs={"step": int(progress)})
                next_beat = t + HEARTBEAT_S / scale
            if rng.random() < step * scale / 21600:  # a data stall every ~6 h of training
                t = self._phase(t, job, attempt, "data_stall", self._dur(30, 180,
                                                                        "wasted_training"))
            if rng.random() < step * scale / 43200:  # a recompile every ~12 h
                t = self._phase(t, job, attempt, "compilation", self._dur(30, 120,
                                                                          "compilation"))
            if since_ckpt >= ckpt_every:
                snap = t
                t = self._phase(t, job, attempt, "checkpoint_save",
                                self._dur(*self.model.checkpoint_save_s, "wasted_training"))
                durable = t + rng.uniform(30, 180) / scale  # async upload finishes later
                em.emit(durable, job, attempt, "checkpoint",
                        attrs={"snapshot_ts": datetime.fromtimestamp(snap, UTC).isoformat(),
                               "step": int(progress)})
                done = progress
                since_ckpt = 0.0
        em.emit(t, job, attempt, "phase_end", phase="training")
        t = self._phase(t, job, attempt, "final_checkpoint", self._dur(30, 90, "shutdown"))
        t = self._phase(t, job, attempt, "model_publish", self._dur(15, 60, "shutdown"))
        t = self._phase(t, job, attempt, "teardown", self._dur(5, 20, "shutdown"))
        em.emit(t, job, attempt, "released", attrs={"reason": "completed"})
        return t, target, True

    def _fail(self, job: str, attempt: int, t: float, done: float) -> tuple[float, float, bool]:
        em, rng, scale = self.em, self.rng, self.spec.time_scale
        roll = rng.random()
        if roll < 0.04:  # lost: the attempt just goes silent (no failure, no release)
            return t + 900 / scale, done, False
        cause = "infra" if roll < 0.6 else "preemption" if roll < 0.85 else "user"
        em.emit(t, job, attempt, "failure", attrs={"cause": cause, "reason": f"demo {cause}"})
        t = self._phase(t + 1 / scale, job, attempt, "teardown", self._dur(10, 90, "shutdown"))
        reason = "preempted" if cause == "preemption" else "failed"
        t += rng.uniform(0, 30) / scale
        em.emit(t, job, attempt, "released", attrs={"reason": reason})
        return t, done, False


def fleet_events(spec: FleetSpec, start: datetime,
                 lifted: Callable[[], bool] = lambda: False,
                 ) -> Iterator[tuple[float, dict[str, Any]]]:
    """Every model's events merged in time order, forever (callers stop at `now`); jobs
    generated once `lifted()` is true have no regressions."""
    sims = [ModelSimulator(m, spec, start.timestamp() + i * 37.0 / spec.time_scale, lifted)
            for i, m in enumerate(fleet_models(spec))]
    heap: list[tuple[float, int, int, list[tuple[float, dict[str, Any]]]]] = []
    for i, sim in enumerate(sims):
        events = sim.next_job()
        heapq.heappush(heap, (events[0][0], i, 0, events))
    while heap:
        _, i, pos, events = heapq.heappop(heap)
        yield events[pos]
        if pos + 1 < len(events):
            heapq.heappush(heap, (events[pos + 1][0], i, pos + 1, events))
        else:
            nxt = sims[i].next_job()
            heapq.heappush(heap, (nxt[0][0], i, 0, nxt))


def start_of_backfill(now: datetime, days: float) -> datetime:
    return now - timedelta(days=days)
