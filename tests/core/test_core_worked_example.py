"""docs/model.md section 6, the worked example, number by number."""

from __future__ import annotations

import pytest
from core_helpers import Job, at, compute, in_minutes, minutes

from ett_core.taxonomy import COMPONENTS


def worked_example() -> Job:
    job = Job(team="llm")
    # attempt 0: allocated 0; scheduling 0-2; launcher_init 2-10; compilation 10-20;
    # training 20-80; checkpoint_save 50-51, checkpoint durable at 52 with snapshot 50;
    # failure (infra) at 80; released at 82.
    job.allocated(0).phase("scheduling", 0, 2).phase("launcher_init", 2, 10)
    job.phase("compilation", 10, 20).phase("training", 20, 80)
    job.phase("checkpoint_save", 50, 51).checkpoint(52, snapshot=50)
    job.failure(80, cause="infra").released(82, reason="failed")
    # attempt 1: allocated 85; initialization 85-93 (including checkpoint_load);
    # compilation 93-98; training 98-158; final_checkpoint + model_publish 158-163;
    # released at 163 (completed).
    job.allocated(85, 1).phase("launcher_init", 85, 90, 1).phase("checkpoint_load", 90, 93, 1)
    job.phase("compilation", 93, 98, 1).phase("training", 98, 158, 1)
    job.phase("final_checkpoint", 158, 160, 1).phase("model_publish", 160, 163, 1)
    job.released(163, 1, reason="completed")
    return job


@pytest.fixture(scope="module")
def example():
    return compute(worked_example().events).result


def test_held_time_is_82_plus_78_minutes(example):
    assert [minutes(a.held_us) for a in example.attempts] == [82, 78]
    assert minutes(example.held_us) == 160


def test_the_three_minutes_between_attempts_are_not_held(example):
    assert example.attempts[0].released_at_us == at(82)
    assert example.attempts[1].allocated_at_us == at(85)


def test_components_match_the_spec(example):
    # scheduling 2; initialization 8 + 8; compilation 10 + 5; save blocking 1 + lost 29;
    # unattributed 2 (80-82); shutdown 5; effective (50 - 20) + (158 - 98) = 90.
    assert in_minutes(example.components) == {
        "scheduling": 2,
        "initialization": 16,
        "compilation": 15,
        "wasted_training": 1 + 29,
        "unattributed": 2,
        "shutdown": 5,
        "effective_training": 90,
    }
    assert set(example.components) == set(COMPONENTS)


def test_lost_progress_is_29_minutes_because_the_save_minute_is_not_training(example):
    assert minutes(example.phases["lost_progress"]) == 29
    assert minutes(example.phases["checkpoint_save"]) == 1


def test_ett_is_56_25_percent(example):
    assert example.ett_ratio == 0.5625
    assert minutes(example.effective_us) == 90


def test_level1_terms_match_the_spec(example):
    level1 = example.level1
    assert minutes(level1.tts_us) == 20
    assert level1.nof == 1
    assert level1.nof_by_cause == {"infra": 1, "user": 0, "preemption": 0, "lost": 0}
    # TTR_1 = 29 (lost) + 2 (80-82) + 13 (85-98)
    assert [minutes(t) for t in level1.ttr_us] == [44]
    assert minutes(level1.mean_ttr_us) == 44
    assert minutes(level1.in_loop_overhead_us) == 1
    assert minutes(level1.final_shutdown_us) == 5


def test_the_level1_identity_holds(example):
    # 90 + 20 + 44 + 1 + 5 = 160
    assert example.level1.total_us == example.held_us


def test_recovery_shows_compilation_paid_again(example):
    breakdown = example.level1.breakdown
    assert minutes(breakdown["tts"]["compilation"]) == 10
    assert minutes(breakdown["ttr"]["compilation"]) == 5
    assert minutes(breakdown["ttr"]["wasted_training"]) == 29
    assert minutes(breakdown["ttr"]["unattributed"]) == 2


def test_owners_split_the_bill(example):
    assert in_minutes(example.owners) == {
        "scheduler": 2,
        "trainer-platform": 16,
        "compiler": 15,
        "checkpointing": 1,
        "reliability": 29,
        "telemetry": 2,
        "publishing": 5,
        "llm": 90,
    }


def test_attempts_report_cause_and_startup(example):
    first, second = example.attempts
    assert (first.end_cause, minutes(first.startup_us), first.gpus) == ("infra", 20, 8)
    assert (second.end_cause, minutes(second.startup_us)) == ("completed", 13)
    assert example.state == "completed"


def test_the_wire_document_carries_the_same_numbers(example):
    wire = example.to_wire()
    assert wire["held_seconds"] == 160 * 60
    assert wire["ett_ratio"] == 0.5625
    assert wire["level1"]["ttr_seconds"] == [44 * 60.0]
    assert wire["attempts"][0]["released_at"] == "2023-11-14T23:35:20Z"
    assert sum(wire["components"].values()) == wire["held_seconds"]


def test_without_snapshot_ts_the_example_checkpoint_snapshots_at_its_own_instant():
    # The fallback of docs/model.md section 4: the save (50-51) is no longer open at 52, so
    # the snapshot is 52:
    # lost 52-80 = 28 and effective 91 (docs/model.md section 9, decision 7).
    job = worked_example()
    job.events = [e._replace(attrs={}) if e.type == "checkpoint" else e for e in job.events]
    result = compute(job.events).result
    assert minutes(result.phases["lost_progress"]) == 28
    assert minutes(result.effective_us) == 91
