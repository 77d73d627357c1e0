"""The scheduler's word (docs/model.md): the worked example, figure by figure, and the rules."""

from __future__ import annotations

import pytest
from core_helpers import Job, at, compute, in_minutes, minutes

from ett_core.instants import format_rfc3339_us

SCHED = {"source": "scheduler"}


def sched(job: Job, kind: str, minute: float, attempt: int = 0, **fields) -> Job:
    attrs = {**SCHED, **fields.pop("attrs", {})}
    return job.add(kind, minute, attempt, attrs=attrs, **fields)


def worked_example() -> Job:
    job = Job(team="llm")
    # attempt 0: queued at -10, scheduler allocated 0; trainer allocated 3, launcher_init
    # 3-8, training from 8 (never ended) with checkpoint_save 20-21 inside and a checkpoint
    # durable at 21 (snapshot 20); heartbeats until 34; scheduler released 50, failed.
    sched(job, "allocated", 0, gpus=8, attrs={"queued_at": format_rfc3339_us(at(-10))})
    job.allocated(3).phase("launcher_init", 3, 8).phase("training", 8, None)
    job.phase("checkpoint_save", 20, 21).checkpoint(21, snapshot=20)
    for minute in range(22, 35, 4):
        job.heartbeat(minute)
    job.heartbeat(34)
    sched(job, "released", 50, attrs={"reason": "failed", "state": "FAILED", "exit_code": "1:0"})
    # attempt 1: queued 50, scheduler allocated 55; trainer allocated 57, launcher_init
    # 57-60, training 60-100, trainer released 100 completed; scheduler released 102.
    sched(job, "allocated", 55, 1, gpus=8, attrs={"queued_at": format_rfc3339_us(at(50))})
    job.allocated(57, 1).phase("launcher_init", 57, 60, 1).phase("training", 60, 100, 1)
    job.released(100, 1, reason="completed")
    sched(job, "released", 102, 1, attrs={"reason": "completed", "state": "COMPLETED"})
    return job


@pytest.fixture(scope="module")
def example():
    return compute(worked_example().events).result


def test_held_time_is_the_schedulers_50_plus_47_minutes(example):
    assert [minutes(a.held_us) for a in example.attempts] == [50, 47]
    assert [a.allocated_at_us for a in example.attempts] == [at(0), at(55)]
    assert [a.released_at_us for a in example.attempts] == [at(50), at(102)]
    assert minutes(example.held_us) == 97


def test_every_phase_of_both_attempts(example):
    # attempt 0: hardware_setup 0-3, launcher_init 3-8, training 8-20, save 20-21,
    # lost 21-34, unreported 34-50; attempt 1: hardware_setup 55-57, launcher_init 57-60,
    # training 60-100, teardown 100-102.
    assert in_minutes(example.phases) == {
        "hardware_setup": 3 + 2,
        "launcher_init": 5 + 3,
        "training": 12 + 40,
        "checkpoint_save": 1,
        "lost_progress": 13,
        "unreported": 16,
        "teardown": 2,
    }


def test_components_and_owners(example):
    assert in_minutes(example.components) == {
        "initialization": 3 + 5 + 2 + 3,
        "effective_training": 52,
        "wasted_training": 1 + 13 + 16,
        "shutdown": 2,
    }
    # The silent tail of an infra-interrupted attempt is owned like its lost progress.
    assert in_minutes(example.owners) == {
        "trainer-platform": 13,
        "llm": 52,
        "checkpointing": 1,
        "reliability": 13 + 16,
        "publishing": 2,
    }


def test_ett_is_52_over_97(example):
    assert minutes(example.effective_us) == 52
    assert example.ett_ratio == 52 / 97


def test_one_infra_failure_at_the_trainers_last_news(example):
    assert example.level1.nof == 1
    assert example.level1.nof_by_cause["infra"] == 1
    assert example.attempts[0].failure_at_us == at(34)
    assert [a.end_cause for a in example.attempts] == ["infra", "completed"]
    assert example.state == "completed"


def test_level1_terms_and_identity(example):
    level1 = example.level1
    assert minutes(level1.tts_us) == 8
    assert [minutes(t) for t in level1.ttr_us] == [13 + 16 + 5]
    assert minutes(level1.in_loop_overhead_us) == 1
    assert minutes(level1.final_shutdown_us) == 2
    assert minutes(example.held_us - example.effective_us) == 8 + 34 + 1 + 2


def test_queue_time_is_beside_held_time_never_inside(example):
    assert [minutes(a.queue_us) for a in example.attempts] == [10, 5]
    assert minutes(example.queue_us) == 15
    wire = example.to_wire()
    assert wire["queue_seconds"] == 15 * 60
    assert wire["held_seconds"] == 97 * 60
    assert wire["unreported_seconds"] == 16 * 60
    assert wire["unreported_ratio"] == 16 / 97
    assert wire["uninstrumented_held_seconds"] == 0
    assert [a["held_by"] for a in wire["attempts"]] == ["scheduler", "scheduler"]


def test_an_uninstrumented_job_is_held_time_in_unreported():
    job = Job(model="batch-eval", team="eval")
    sched(job, "allocated", 0, gpus=4)
    sched(job, "released", 30, attrs={"reason": "completed"})
    result = compute(job.events).result
    assert in_minutes(result.phases) == {"unreported": 30}
    assert in_minutes(result.components) == {"unattributed": 30}
    assert result.uninstrumented_held_us == 30 * 60_000_000
    assert result.state == "completed"


def test_a_cancel_after_silence_is_not_an_interruption():
    job = Job()
    sched(job, "allocated", 0, gpus=8)
    job.allocated(1).phase("training", 1, None).heartbeat(10)
    sched(job, "released", 20, attrs={"reason": "cancelled"})
    result = compute(job.events).result
    assert result.level1.nof == 0
    assert result.state == "cancelled"
    assert in_minutes(result.phases) == {"hardware_setup": 1, "training": 9, "unreported": 10}
    assert in_minutes(result.components)["unattributed"] == 10


def test_end_cause_precedence():
    # A failure of either source first; else the trainer's release reason; else the
    # scheduler's.
    trainer_released = Job()
    sched(trainer_released, "allocated", 0, gpus=8)
    trainer_released.allocated(1).phase("training", 1, 10).released(10, reason="completed")
    sched(trainer_released, "released", 11, attrs={"reason": "failed"})
    assert compute(trainer_released.events).result.state == "completed"

    scheduler_failure = Job()
    sched(scheduler_failure, "allocated", 0, gpus=8)
    scheduler_failure.allocated(1).phase("training", 1, 10).released(10, reason="completed")
    sched(scheduler_failure, "failure", 9, attrs={"cause": "preemption"})
    sched(scheduler_failure, "released", 11, attrs={"reason": "preempted"})
    result = compute(scheduler_failure.events).result
    assert result.state == "preemption"
    assert result.attempts[0].failure_at_us == at(9)


def test_an_open_allocation_with_a_silent_trainer_counts_unreported_up_to_now():
    job = Job()
    sched(job, "allocated", 0, gpus=8)
    job.allocated(2).phase("training", 2, None).heartbeat(10)
    # Within the heartbeat timeout the open phase keeps the time; past it, unreported.
    soon = compute(job.events, now=15, timeout=10).result
    assert in_minutes(soon.phases) == {"hardware_setup": 2, "training": 13}
    late = compute(job.events, now=40, timeout=10).result
    assert late.state == "running"
    assert in_minutes(late.phases) == {"hardware_setup": 2, "training": 8, "unreported": 30}


def test_the_trainer_names_the_model_and_a_conflict_is_visible():
    sched_only = Job(model="slurm-name", team="ops")
    sched(sched_only, "allocated", 0, gpus=8)
    sched(sched_only, "released", 20, attrs={"reason": "completed"})
    trainer = Job(model="llama", team="llm")
    trainer.allocated(2).phase("training", 2, 18).released(18)
    result = compute([*sched_only.events, *[e._replace(event_id="t" + e.event_id)
                                            for e in trainer.events]]).result
    assert (result.model, result.team) == ("llama", "llm")
    assert minutes(result.held_us) == 20
    assert result.diagnostics.mapping_conflicts == (
        "scheduler model 'slurm-name' (job: 'llama')", "scheduler team 'ops' (job: 'llm')")


def test_the_scheduler_bounds_leave_no_guessed_end_in_the_diagnostics(example):
    # The trainer's silence at 34 is not a guessed end: the scheduler said 50.
    assert example.diagnostics.inferred_end_attempts == ()
    assert example.diagnostics.events_before_allocation == 0
    assert example.diagnostics.scheduler_release_missing == 0
    assert example.diagnostics.mapping_conflicts == ()
