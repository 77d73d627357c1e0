"""Hand-computed scenarios; each derives its numbers in comments (times in minutes)."""

from __future__ import annotations

import random

from core_helpers import Job, at, compute, in_minutes, minutes

from ett_core import Taxonomy


def level1_minutes(result) -> dict[str, object]:
    level1 = result.level1
    return {
        "effective": minutes(level1.effective_us),
        "tts": minutes(level1.tts_us),
        "ttr": [minutes(t) for t in level1.ttr_us],
        "in_loop": minutes(level1.in_loop_overhead_us),
        "final": minutes(level1.final_shutdown_us),
    }


def test_a_restart_without_any_checkpoint_loses_all_training_of_the_failed_attempt():
    job = Job()
    job.allocated(0).phase("scheduling", 0, 1).phase("launcher_init", 1, 5)
    job.phase("training", 5, None).failure(35).released(36, reason="failed")
    job.allocated(40, 1).phase("launcher_init", 40, 44, 1).phase("training", 44, 104, 1)
    job.released(104, 1)
    result = compute(job.events).result
    # held 36 + 64 = 100; lost = all of attempt 0's training 5-35 = 30; 35-36 unattributed.
    assert minutes(result.held_us) == 100
    assert in_minutes(result.phases) == {
        "scheduling": 1,
        "launcher_init": 8,
        "lost_progress": 30,
        "unattributed": 1,
        "training": 60,
    }
    # TTS 5; TTR = 30 lost + 1 after failure + 4 startup of attempt 1; 60+5+35 = 100.
    assert level1_minutes(result) == {
        "effective": 60,
        "tts": 5,
        "ttr": [35],
        "in_loop": 0,
        "final": 0,
    }
    assert result.ett_ratio == 0.6


def test_three_restarts_with_mixed_causes_give_one_recovery_each():
    job = Job(team="nlp")
    # a0: init 0-2, training 2-20, checkpoint durable 10 (no snapshot, no save open: 10),
    # infra failure at 20 -> lost 10-20 = 10 (reliability).
    job.allocated(0).phase("launcher_init", 0, 2).phase("training", 2, None)
    job.add("checkpoint", 10).failure(20, cause="infra").released(20, reason="failed")
    # a1: init 25-28, training 28-40, released "preempted" with no failure event:
    # preemption at 40; no checkpoint -> lost 28-40 = 12 (scheduler).
    job.allocated(25, 1).phase("launcher_init", 25, 28, 1).phase("training", 28, None, 1)
    job.released(40, 1, reason="preempted")
    # a2: init 45-47, training 47-, save 50-52 with checkpoint at 52 (snapshot = the open
    # save's start, 50), user failure at 55, released 56 -> lost 52-55 = 3 (model team),
    # 55-56 unattributed.
    job.allocated(45, 2).phase("launcher_init", 45, 47, 2).phase("training", 47, None, 2)
    job.add("phase_start", 50, 2, phase="checkpoint_save").add("checkpoint", 52, 2)
    job.add("phase_end", 52, 2, phase="checkpoint_save")
    job.failure(55, 2, cause="user").released(56, 2, reason="failed")
    # a3: init 60-64, training 64-100, model_publish 100-102, completed.
    job.allocated(60, 3).phase("launcher_init", 60, 64, 3).phase("training", 64, 100, 3)
    job.phase("model_publish", 100, 102, 3).released(102, 3)
    result = compute(job.events).result
    # held 20 + 15 + 11 + 42 = 88
    assert minutes(result.held_us) == 88
    assert [a.end_cause for a in result.attempts] == ["infra", "preemption", "user", "completed"]
    assert result.level1.nof_by_cause == {"infra": 1, "user": 1, "preemption": 1, "lost": 0}
    # TTR_0 = 10 + 0 + startup_1 3 = 13; TTR_1 = 12 + 0 + startup_2 2 = 14;
    # TTR_2 = 3 + 1 + startup_3 4 = 8. effective 8 + 0 + 3 + 36 = 47; in-loop: save 2;
    # final shutdown 2; TTS 2. 47 + 2 + 35 + 2 + 2 = 88.
    assert level1_minutes(result) == {
        "effective": 47,
        "tts": 2,
        "ttr": [13, 14, 8],
        "in_loop": 2,
        "final": 2,
    }
    assert minutes(result.level1.mean_ttr_us) == 35 / 3
    # Lost progress is billed by cause; user-caused loss goes to the model's team.
    assert in_minutes(result.owners) == {
        "trainer-platform": 11,
        "reliability": 10,
        "scheduler": 12,
        "checkpointing": 2,
        "telemetry": 1,
        "publishing": 2,
        "nlp": 47 + 3,
    }


def test_a_running_job_counts_up_to_now_and_reports_training_since_the_snapshot_at_risk():
    job = Job()
    job.allocated(0).phase("launcher_init", 0, 5).phase("training", 5, None)
    job.phase("checkpoint_save", 20, 21).checkpoint(22, snapshot=20).heartbeat(30)
    result = compute(job.events, now=33, timeout=10)
    r = result.result
    # Open: held 0-33. training 5-20 and 21-33 = 27 effective; 21-33 is after the latest
    # durable snapshot (20), so at risk = 12.
    assert r.state == "running" and r.attempts[0].released_at_us is None
    assert minutes(r.held_us) == 33
    assert minutes(r.effective_us) == 27
    assert minutes(r.at_risk_us) == 12
    # TTS 5 + in-loop 1 + effective 27 = 33; no final shutdown while open.
    assert level1_minutes(r) == {"effective": 27, "tts": 5, "ttr": [], "in_loop": 1, "final": 0}
    unsettled = [
        (minutes(s.start_us - at(0)), minutes(s.end_us - at(0)))
        for s in result.segments
        if not s.settled
    ]
    assert unsettled == [(21, 33)]


def test_time_after_the_last_news_of_an_open_attempt_is_unsettled():
    job = Job()
    job.allocated(0).phase("launcher_init", 0, None).heartbeat(4)
    result = compute(job.events, now=9, timeout=10)
    # Nothing trains: no at-risk; 4-9 (after the last news) is unsettled init time.
    assert [(s.phase, s.settled, minutes(s.duration_us)) for s in result.segments] == [
        ("launcher_init", True, 4),
        ("launcher_init", False, 5),
    ]
    assert result.result.at_risk_us == 0
    # Never reached training: the whole running attempt is startup, i.e. TTS.
    assert minutes(result.result.level1.tts_us) == 9


def test_a_lost_attempt_ends_at_its_last_news_once_the_timeout_has_passed():
    job = Job()
    job.allocated(0).phase("scheduling", 0, 1).phase("training", 1, None)
    job.checkpoint(11, snapshot=10).heartbeat(20)
    r = compute(job.events, now=100, timeout=10).result
    # 100 - 20 > 10: ends at 20, cause lost; lost progress 10-20 (reliability);
    # effective 1-10 = 9; TTR = 10 + 0 (no time after F = the end) = 10.
    assert (r.state, r.attempts[0].released_at_us) == ("lost", at(20))
    assert minutes(r.held_us) == 20
    assert in_minutes(r.owners) == {"scheduler": 1, "unassigned": 9, "reliability": 10}
    assert level1_minutes(r) == {"effective": 9, "tts": 1, "ttr": [10], "in_loop": 0, "final": 0}
    assert r.level1.nof_by_cause["lost"] == 1
    assert r.diagnostics.inferred_end_attempts == (0,)


def test_nesting_three_deep_gives_each_instant_to_the_innermost_phase():
    job = Job()
    job.allocated(0).phase("launcher_init", 0, 10).phase("init_plugins", 2, 8)
    job.phase("device_init", 3, 5)
    job.phase("training", 10, 20).phase("compilation", 12, 14).phase("data_stall", 13, 13.5)
    job.released(20)
    r = compute(job.events).result
    # launcher_init 0-2 + 8-10 = 4; init_plugins 2-3 + 5-8 = 4; device_init 3-5 = 2;
    # training 10-12 + 14-20 = 8; compilation 12-13 + 13.5-14 = 1.5; data_stall 0.5.
    assert in_minutes(r.phases) == {
        "launcher_init": 4,
        "init_plugins": 4,
        "device_init": 2,
        "training": 8,
        "compilation": 1.5,
        "data_stall": 0.5,
    }
    assert in_minutes(r.owners)["data-platform"] == 0.5
    # TTS 10; in-loop = the recompile and the stall inside training (2); completed.
    assert level1_minutes(r) == {"effective": 8, "tts": 10, "ttr": [], "in_loop": 2, "final": 0}


def test_a_phase_that_outlives_its_parent_keeps_owning_its_time():
    job = Job()
    job.allocated(0).phase("launcher_init", 0, 6).phase("device_init", 4, 8).released(10)
    r = compute(job.events).result
    # 0-4 launcher_init; 4-8 device_init (most recently started, still open); 8-10 nothing.
    assert in_minutes(r.phases) == {"launcher_init": 4, "device_init": 4, "unattributed": 2}


def test_an_unknown_phase_goes_to_unattributed_and_keeps_its_name():
    job = Job()
    job.allocated(0).phase("training", 0, 10).phase("mystery", 4, 6).released(10)
    r = compute(job.events).result
    # training 0-4 + 6-10 = 8; mystery 4-6 = 2 in unattributed, owned by telemetry.
    assert in_minutes(r.components) == {"effective_training": 8, "unattributed": 2}
    assert in_minutes(r.phases) == {"training": 8, "mystery": 2}
    assert in_minutes(r.owners) == {"unassigned": 8, "telemetry": 2}
    assert r.diagnostics.unknown_phase_events == 2
    assert r.diagnostics.unknown_phase_names == ("mystery",)
    assert minutes(r.level1.in_loop_overhead_us) == 2


def test_a_background_phase_owns_no_time():
    job = Job()
    job.allocated(0).phase("training", 0, 10)
    job.phase("checkpoint_save", 3, 8, background=True).phase(
        "checkpoint_save", 9, 12, background=True
    )
    job.released(12)
    r = compute(job.events).result
    # The async saves own nothing: training 0-10 = 10; 10-12 nothing covers: unattributed,
    # and after the last training instant of a completed attempt: final shutdown.
    assert in_minutes(r.phases) == {"training": 10, "unattributed": 2}
    assert minutes(r.level1.final_shutdown_us) == 2


def test_out_of_order_and_duplicated_delivery_changes_nothing():
    from test_core_worked_example import worked_example

    events = worked_example().events
    in_order = compute(events)
    shuffled = list(events) + events[::3]
    random.Random(7).shuffle(shuffled)
    redelivered = compute(shuffled)
    assert redelivered.segments == in_order.segments
    wire, expected = redelivered.result.to_wire(), in_order.result.to_wire()
    assert wire["diagnostics"].pop("duplicates_dropped") == len(events[::3])
    expected["diagnostics"].pop("duplicates_dropped")
    assert wire == expected


def test_a_user_failure_bills_lost_progress_to_the_models_team():
    job = Job(team="vision")
    job.allocated(0).phase("launcher_init", 0, 3).phase("training", 3, None)
    job.add("checkpoint", 20, attrs={"snapshot_ts": "2023-11-14T22:31:20+00:00"})  # minute 18
    job.failure(25, cause="user").phase("teardown", 25, 27).released(28, reason="failed")
    r = compute(job.events).result
    # lost = training 18-25 = 7 (vision); effective 3-18 = 15; teardown 25-27 (publishing);
    # 27-28 unattributed. TTR = 7 + 3 after the failure = 10. 15 + 3 + 10 = 28.
    assert in_minutes(r.owners) == {
        "trainer-platform": 3,
        "vision": 15 + 7,
        "publishing": 2,
        "telemetry": 1,
    }
    assert r.state == "user"
    assert level1_minutes(r) == {"effective": 15, "tts": 3, "ttr": [10], "in_loop": 0, "final": 0}


def test_a_failure_closes_phases_left_open_and_their_late_ends_are_not_unmatched():
    job = Job()
    job.allocated(0).phase("training", 0, None).add("phase_start", 10, phase="checkpoint_save")
    job.add("phase_end", 5, phase="compilation")  # never started: unmatched
    job.failure(12).add("phase_end", 14, phase="training").released(15, reason="failed")
    r = compute(job.events).result
    # training 0-10 all lost (no checkpoint); the save 10-12 closes at the failure;
    # 12-15 unattributed. TTR = 10 lost + 3 after F = 13; in-loop = the save 2.
    assert in_minutes(r.phases) == {"lost_progress": 10, "checkpoint_save": 2, "unattributed": 3}
    assert level1_minutes(r) == {"effective": 0, "tts": 0, "ttr": [13], "in_loop": 2, "final": 0}
    assert r.diagnostics.unmatched_phase_ends == 1
    assert r.diagnostics.late_phase_ends == 1


def test_an_async_checkpoint_durable_after_the_failure_does_not_count():
    job = Job()
    job.allocated(0).phase("training", 0, None)
    job.phase("checkpoint_save", 10, 11).checkpoint(15, snapshot=10)
    job.phase("checkpoint_save", 20, 21).failure(25).checkpoint(32, snapshot=20)
    job.released(35, reason="failed")
    r = compute(job.events).result
    # Only the snapshot at 10 is durable before F=25: lost = 11-20 + 21-25 = 13;
    # effective 0-10; 25-35 unattributed. TTR = 13 + 10 = 23; in-loop: two saves = 2.
    assert in_minutes(r.phases) == {
        "training": 10,
        "checkpoint_save": 2,
        "lost_progress": 13,
        "unattributed": 10,
    }
    assert level1_minutes(r) == {"effective": 10, "tts": 0, "ttr": [23], "in_loop": 2, "final": 0}
    assert r.diagnostics.checkpoints_after_failure == 1


def test_a_missing_allocated_starts_the_attempt_at_its_first_event_and_gpus_default_to_one():
    job = Job()
    job.add("phase_start", 5, phase="scheduling").add("phase_end", 7, phase="scheduling")
    job.phase("training", 7, 20).released(20)
    comp = compute(job.events)
    r = comp.result
    # held 5-20 = 15; no gpus anywhere: 1, flagged.
    assert (r.attempts[0].allocated_at_us, minutes(r.held_us)) == (at(5), 15)
    assert r.attempts[0].gpus == 1
    assert r.diagnostics.gpus_defaulted_attempts == (0,)
    assert {s.gpus for s in comp.segments} == {1}


def test_an_attempt_without_gpus_inherits_them_from_the_previous_attempt():
    job = Job()
    job.allocated(0, gpus=64).phase("training", 0, 5).released(5, reason="preempted")
    job.allocated(6, 1, gpus=None).phase("training", 6, 9, 1).released(9, 1)
    r = compute(job.events).result
    assert [a.gpus for a in r.attempts] == [64, 64]
    assert r.diagnostics.gpus_defaulted_attempts == ()


def test_a_missing_release_ends_where_the_next_attempt_starts_within_the_timeout():
    job = Job()
    job.allocated(0).phase("scheduling", 0, 1).phase("training", 1, None)
    job.checkpoint(20, snapshot=20).heartbeat(30)
    job.allocated(35, 1).phase("scheduling", 35, 36, 1).phase("training", 36, 50, 1)
    job.released(50, 1)
    r = compute(job.events, timeout=10).result
    # 35 - 30 = 5 <= 10: attempt 0 ends at 35, cause lost; its training runs to 35:
    # lost 20-35 = 15, effective 1-20 = 19. Held 35 + 15 = 50.
    # TTR = 15 + 0 + startup_1 1 = 16; effective 19 + 14 = 33; 33 + 1 + 16 = 50.
    assert [(a.end_cause, a.released_at_us) for a in r.attempts] == [
        ("lost", at(35)),
        ("completed", at(50)),
    ]
    assert level1_minutes(r) == {"effective": 33, "tts": 1, "ttr": [16], "in_loop": 0, "final": 0}


def test_a_missing_release_ends_at_the_last_news_when_the_next_attempt_is_beyond_the_timeout():
    job = Job()
    job.allocated(0).phase("scheduling", 0, 1).phase("training", 1, None)
    job.checkpoint(20, snapshot=20).heartbeat(30)
    job.allocated(60, 1).phase("scheduling", 60, 61, 1).phase("training", 61, 75, 1)
    job.released(75, 1)
    r = compute(job.events, timeout=10).result
    # 60 - 30 > 10: attempt 0 ends at its last news, 30; lost 20-30 = 10; the 30 minutes
    # up to the restart are not held. Held 30 + 15 = 45; TTR = 10 + 1 = 11.
    assert [(a.end_cause, a.released_at_us) for a in r.attempts] == [
        ("lost", at(30)),
        ("completed", at(75)),
    ]
    assert minutes(r.held_us) == 45
    assert level1_minutes(r) == {"effective": 33, "tts": 1, "ttr": [11], "in_loop": 0, "final": 0}


def test_a_silent_last_attempt_stays_open_until_the_timeout_then_becomes_lost():
    job = Job()
    job.allocated(0).phase("training", 0, None).heartbeat(20)
    running = compute(job.events, now=25, timeout=10).result
    # 25 - 20 <= 10: open to now; no checkpoint, so all 25 minutes of training are at risk.
    assert (running.state, minutes(running.held_us), minutes(running.at_risk_us)) == (
        "running",
        25,
        25,
    )
    lost = compute(job.events, now=31, timeout=10).result
    # 31 - 20 > 10: ends at 20, all training lost.
    assert (lost.state, minutes(lost.held_us), lost.effective_us) == ("lost", 20, 0)
    assert in_minutes(lost.phases) == {"lost_progress": 20}


def test_a_cancelled_attempt_is_not_an_interruption_and_keeps_its_training():
    job = Job()
    job.allocated(0).phase("training", 0, 10).released(12, reason="cancelled")
    r = compute(job.events).result
    # No checkpoint, but cancelled: training stays effective; 10-12 is final shutdown.
    assert (r.state, minutes(r.effective_us), r.level1.nof) == ("cancelled", 10, 0)
    assert minutes(r.level1.final_shutdown_us) == 2


def test_a_restart_after_a_clean_end_counts_its_startup_as_time_to_start():
    job = Job()
    job.allocated(0).phase("launcher_init", 0, 2).phase("training", 2, 10)
    job.released(10, reason="cancelled")
    job.allocated(20, 1).phase("launcher_init", 20, 23, 1).phase("training", 23, 30, 1)
    job.released(30, 1)
    r = compute(job.events).result
    # No interruption, so no TTR: both startups (2 + 3) are time to start.
    assert level1_minutes(r) == {"effective": 15, "tts": 5, "ttr": [], "in_loop": 0, "final": 0}


def test_a_failure_before_training_makes_the_rest_of_the_attempt_recovery():
    job = Job()
    job.allocated(0).phase("launcher_init", 0, None).failure(4).released(6, reason="failed")
    job.allocated(8, 1).phase("launcher_init", 8, 10, 1).phase("training", 10, 20, 1)
    job.released(20, 1)
    r = compute(job.events).result
    # Startup of attempt 0 ends at its failure (4): TTS 4; TTR = 0 lost + 2 after F +
    # startup_1 2 = 4; effective 10. 10 + 4 + 4 = 18 held.
    assert [minutes(a.startup_us) for a in r.attempts] == [4, 2]
    assert level1_minutes(r) == {"effective": 10, "tts": 4, "ttr": [4], "in_loop": 0, "final": 0}


def test_an_open_attempt_with_a_reported_failure_counts_the_failure_before_the_release():
    job = Job()
    job.allocated(0).phase("training", 0, None).checkpoint(5, snapshot=5).failure(8)
    r = compute(job.events, now=12, timeout=10).result
    # No release yet and within the timeout: open to now (12), but the failure is known:
    # lost 5-8 (settled), 8-12 recovery, still counted.
    assert (r.state, r.level1.nof, minutes(r.held_us)) == ("running", 1, 12)
    assert level1_minutes(r) == {"effective": 5, "tts": 0, "ttr": [7], "in_loop": 0, "final": 0}
    assert r.at_risk_us == 0


def test_the_models_team_comes_from_configuration_then_the_first_team_in_event_order():
    job = Job()
    job.allocated(0).heartbeat(1, team="late-team").heartbeat(0.5, team="early-team")
    job.released(2)
    assert compute(job.events).result.team == "early-team"
    data = {"components": {}, "models": {"llama": "configured-team"}}
    from ett_core.taxonomy import DEFAULT_MAPPING

    data["components"] = DEFAULT_MAPPING["components"]
    configured = Taxonomy.from_mapping(data)
    assert compute(job.events, taxonomy=configured).result.team == "configured-team"
    assert compute(Job().allocated(0).released(1).events).result.team == "unassigned"


def test_events_from_other_ranks_stay_out_of_the_timeline():
    job = Job()
    job.allocated(0).phase("training", 0, 10).released(10)
    job.add("phase_start", 2, phase="data_stall", rank=3).add(
        "phase_end", 4, phase="data_stall", rank=3
    )
    job.add("failure", 5, rank=1, attrs={"cause": "user"})
    r = compute(job.events).result
    assert in_minutes(r.phases) == {"training": 10}
    assert r.state == "completed"
    assert r.diagnostics.non_timeline_events == 3


def test_same_instant_events_are_ordered_by_type_not_by_arrival():
    job = Job()
    # The save ends and a new save starts at 5; a checkpoint durable at the failure instant
    # counts; a teardown starting at the failure instant survives the failure.
    job.allocated(0).phase("training", 0, None)
    job.phase("checkpoint_save", 4, 5).phase("checkpoint_save", 5, 6)
    job.failure(8).checkpoint(8, snapshot=7).phase("teardown", 8, 9).released(9, reason="failed")
    events = list(reversed(job.events))
    r = compute(events).result
    # training 0-4 + 6-7 effective = 5; saves 4-6 = 2; lost 7-8 = 1; teardown 8-9 = 1.
    assert in_minutes(r.phases) == {
        "training": 5,
        "checkpoint_save": 2,
        "lost_progress": 1,
        "teardown": 1,
    }


def test_a_release_reason_failed_without_a_failure_event_is_an_infra_failure_at_release():
    job = Job()
    job.allocated(0).phase("training", 0, None).checkpoint(6, snapshot=6).released(
        10, reason="failed"
    )
    r = compute(job.events).result
    # F = 10: training 6-10 lost, billed to reliability.
    assert (r.state, r.attempts[0].failure_at_us) == ("infra", at(10))
    assert in_minutes(r.owners) == {"unassigned": 6, "reliability": 4}


def test_events_before_the_allocation_are_clamped_to_it_and_after_the_release_ignored():
    job = Job()
    job.phase("scheduling", -2, 1).allocated(0).phase("training", 1, 9)
    job.released(9).released(10).heartbeat(11).add("phase_start", 12, phase="teardown")
    r = compute(job.events).result
    # Held 0-9 only: scheduling counts from the allocation; nothing after the release.
    assert in_minutes(r.phases) == {"scheduling": 1, "training": 8}
    d = r.diagnostics
    # The second `released` is itself after the first one's instant: ignored with the rest.
    assert (d.events_before_allocation, d.events_after_end, d.extra_released) == (1, 3, 1)


def test_an_unknown_failure_cause_and_release_reason_default_and_are_counted():
    job = Job()
    job.allocated(0).phase("training", 0, 5).add("failure", 5, attrs={"cause": "gremlins"})
    job.add("released", 6, attrs={})
    job.allocated(7, 1).add("released", 8, 1, attrs={"reason": "vanished"})
    r = compute(job.events).result
    assert [a.end_cause for a in r.attempts] == ["infra", "completed"]
    d = r.diagnostics
    assert (d.failure_cause_defaulted, d.release_reason_defaulted) == (1, 1)
