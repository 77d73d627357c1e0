"""Engine latency: one job with 10,000 events through `compute_job` (target: < 50 ms median).

The job is realistic in shape: 4 attempts, each with initialization phases, one long
training phase holding nested checkpoint saves (with durable checkpoints), data stalls
and recompiles, heartbeats carrying the step, a failure and a release, on 8 GPUs. Input
is shuffled, with 2% duplicates, so ordering and de-duplication are part of the measured
cost. The clock is read here, in the benchmark, never in the engine.

    python -m bench --only engine

Prints the median, min and max of the runs and appends a record to
bench/results/engine.json.
"""

from __future__ import annotations

import random
import time

from ett_core import Event, Taxonomy, compute_job

from .common import fmt, record, spread

NAME = "engine"
SECOND = 1_000_000


def make_job(n_events: int, seed: int = 1) -> tuple[list[Event], int]:
    rnd = random.Random(seed)
    events: list[Event] = []
    t = 1_700_000_000 * SECOND

    def emit(type: str, attempt: int, **fields: object) -> None:
        events.append(
            Event(
                event_id=f"{len(events):08d}",
                ts_us=t,
                job_id="bench-job",
                attempt=attempt,
                model="bench-model",
                type=type,
                team="bench-team",
                **fields,  # type: ignore[arg-type]
            )
        )

    per_attempt = n_events // 4
    for attempt in range(4):
        start = len(events)
        emit("allocated", attempt, gpus=8)
        for phase in ("scheduling", "launcher_init", "checkpoint_load", "compilation"):
            emit("phase_start", attempt, phase=phase)
            t += rnd.randint(10, 300) * SECOND
            emit("phase_end", attempt, phase=phase)
        emit("phase_start", attempt, phase="training")
        while len(events) - start < per_attempt - 4:
            t += rnd.randint(1, 60) * SECOND
            roll = rnd.random()
            if roll < 0.15:
                emit("phase_start", attempt, phase="checkpoint_save")
                t += rnd.randint(1, 20) * SECOND
                emit("phase_end", attempt, phase="checkpoint_save")
                emit("checkpoint", attempt, attrs={"step": len(events)})
            elif roll < 0.3:
                phase = rnd.choice(("data_stall", "compilation"))
                emit("phase_start", attempt, phase=phase)
                t += rnd.randint(1, 30) * SECOND
                emit("phase_end", attempt, phase=phase)
            else:
                # Heartbeats carry the step, as the SDK's heartbeat thread sends it: the
                # engine reads it for stalls (docs/model.md section 24).
                emit("heartbeat", attempt, attrs={"step": len(events)})
        t += 30 * SECOND
        if attempt < 3:
            emit("failure", attempt, attrs={"cause": "infra"})
            t += 60 * SECOND
            emit("released", attempt, attrs={"reason": "failed"})
        else:
            emit("phase_end", attempt, phase="training")
            emit("released", attempt, attrs={"reason": "completed"})
        t += 120 * SECOND
    events = events[:n_events]
    delivered = events + rnd.sample(events, len(events) // 50)
    rnd.shuffle(delivered)
    return delivered, t


def run(_pg: object, quick: bool, runs: int = 7, n_events: int = 10_000) -> dict:
    events, now_us = make_job(n_events)
    taxonomy = Taxonomy.default()

    def once() -> float:
        t0 = time.perf_counter()
        comp = compute_job(
            events, taxonomy=taxonomy, now_us=now_us, heartbeat_timeout_us=600 * SECOND
        )
        elapsed = time.perf_counter() - t0
        assert comp.result.level1.total_us == comp.result.held_us
        return elapsed * 1000

    once()  # warm-up: imports and first-call allocation are not the steady state
    timings = spread([once() for _ in range(runs)], 2)
    comp = compute_job(events, taxonomy=taxonomy, now_us=now_us, heartbeat_timeout_us=600 * SECOND)
    figures = {"events": len(events), "unique_events": n_events,
               "segments": len(comp.segments), "compute_job_ms": timings}
    print(f"compute_job, {len(events)} events ({n_events} unique), {len(comp.segments)}"
          f" segments: {fmt(timings, ' ms')}")
    return record(NAME, quick, figures, [
        (f"compute_job, one job of {n_events} events, < 50 ms median", fmt(timings, " ms"),
         timings["median"] < 50),
    ])
