"""Per-attempt checkpoint facts (ett_core.checkpoints), worked by hand in minutes."""

from __future__ import annotations

from core_helpers import Job, compute, minutes
from core_strategies import streams
from hypothesis import given, settings

from ett_core import Taxonomy, compute_job


def facts_in_minutes(job: Job) -> list[dict[str, object]]:
    return [{
        "held": minutes(c.held_us), "interrupted": c.interrupted,
        "save": minutes(c.blocking_save_us), "durable": c.durable_checkpoints,
        "intervals": [minutes(i) for i in c.intervals_us],
        "lost": minutes(c.lost_progress_us),
        "ttr": None if c.ttr_us is None else minutes(c.ttr_us),
    } for c in compute(job.events).checkpoints]


def test_intervals_count_training_between_snapshots_and_leave_out_the_blocking_saves():
    job = Job()
    job.allocated(0).phase("launcher_init", 0, 5).phase("training", 5, None)
    # Saves block 20-21, 41-42, 62-63; each becomes durable at its end; snapshot = save start.
    for start in (20, 41, 62):
        job.phase("checkpoint_save", start, start + 1).checkpoint(start + 1)
    job.add("phase_end", 100, phase="training").released(100)
    # Snapshots 20, 41, 62: training 21-41 = 20 and 42-62 = 20 (the saves are not training).
    assert facts_in_minutes(job) == [{
        "held": 100, "interrupted": False, "save": 3, "durable": 3,
        "intervals": [20, 20], "lost": 0, "ttr": None,
    }]


def test_an_interrupted_attempt_reports_its_lost_progress_and_its_recovery_time():
    job = Job()
    job.allocated(0).phase("training", 0, None)
    job.phase("checkpoint_save", 30, 32).checkpoint(32)
    # A checkpoint durable after the failure at 50 saved nothing: not counted.
    job.failure(50).checkpoint(51).released(52, reason="failed")
    job.allocated(55, 1).phase("checkpoint_load", 55, 60, 1).phase("training", 60, 90, 1)
    job.released(90, 1)
    facts = facts_in_minutes(job)
    # Attempt 0: snapshot 30; lost = training 32-50 = 18; TTR = 18 lost + 2 after F (50-52)
    # + 5 startup of attempt 1 (55-60) = 25. The restart cost besides lost progress is 7.
    assert facts[0] == {"held": 52, "interrupted": True, "save": 2, "durable": 1,
                        "intervals": [], "lost": 18, "ttr": 25}
    assert facts[1] == {"held": 35, "interrupted": False, "save": 0, "durable": 0,
                        "intervals": [], "lost": 0, "ttr": None}


def test_an_asynchronous_save_blocks_only_for_its_staging_and_snapshots_at_staging():
    job = Job()
    job.allocated(0).phase("training", 0, None)
    # Staging blocks 10-11 (checkpoint_save); the upload runs in the background to 18.
    job.phase("checkpoint_save", 10, 11).phase("checkpoint_upload", 11, 18, background=True)
    job.checkpoint(18, snapshot=10)
    job.phase("checkpoint_save", 40, 41).checkpoint(47, snapshot=40)
    job.add("phase_end", 60, phase="training").released(60)
    # Blocking 1 + 1 = 2; interval: training 11-40 = 29 (the background upload is training).
    assert facts_in_minutes(job)[0]["save"] == 2
    assert facts_in_minutes(job)[0]["intervals"] == [29]


@settings(max_examples=200, deadline=None)
@given(streams)
def test_checkpoint_facts_add_up_to_the_jobs_own_figures(stream):
    events, now_us, timeout_us = stream
    comp = compute_job(events, taxonomy=Taxonomy.default(), now_us=now_us,
                       heartbeat_timeout_us=timeout_us)
    result, facts = comp.result, comp.checkpoints
    # One fact per attempt, agreeing with the result to the microsecond.
    assert [c.attempt for c in facts] == [a.attempt for a in result.attempts]
    assert sum(c.held_us for c in facts) == result.held_us
    assert sum(c.lost_progress_us for c in facts) == result.phases.get("lost_progress", 0)
    assert sum(c.blocking_save_us for c in facts) == result.phases.get("checkpoint_save", 0)
    assert sum(c.interrupted for c in facts) == result.level1.nof
    assert sum(c.ttr_us or 0 for c in facts) == sum(result.level1.ttr_us)
    for c in facts:
        # Intervals are training, so they fit in what the attempt trained (lost included).
        trained = sum(s.duration_us for s in comp.segments if s.attempt == c.attempt
                      and s.phase in ("training", "lost_progress"))
        assert all(i > 0 for i in c.intervals_us) and sum(c.intervals_us) <= trained
        assert len(c.intervals_us) <= max(0, c.durable_checkpoints - 1)
