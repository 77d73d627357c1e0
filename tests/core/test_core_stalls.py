"""Progress and stalls (docs/model.md section 14): the worked examples, by hand, and
properties over generated jobs that report steps."""

from __future__ import annotations

from collections import Counter

import pytest
from core_helpers import Job, at, compute, in_minutes, minutes
from core_strategies import MINUTE, plausible_streams
from hypothesis import given, settings
from hypothesis import strategies as st

from ett_core import Event, Taxonomy, TaxonomyError, compute_job
from ett_core.taxonomy import DEFAULT_MAPPING

FAST = settings(max_examples=200, deadline=None)


def steps(job: Job, minutes_at: list[float], first: int = 1, per: int = 1,
          attempt: int = 0) -> Job:
    for index, minute in enumerate(minutes_at):
        job.heartbeat(minute, attempt, attrs={"step": first + index * per})
    return job


def stalled(comp) -> float:
    return minutes(comp.result.phases.get("stalled", 0))


# Worked example 1: a stall inside training. Steps every minute, 1..60 at minutes 1..60;
# the trainer hangs; step 61 comes at minute 90, then one a minute to minute 119.
# Intervals: 59 of 1 min, one of 30, 29 of 1: median 1 min, threshold max(5 min, 5 x 1).
# The 30-minute gap is a stall; its first minute is still training: stalled [61, 90).
def stall_inside_training() -> Job:
    job = Job(team="ads").allocated(0).phase("training", 0, 120).released(120)
    steps(job, [float(m) for m in range(1, 61)])
    steps(job, [float(m) for m in range(90, 120)], first=61)
    return job


def test_a_stall_inside_training():
    comp = compute(stall_inside_training().events)
    result = comp.result
    assert in_minutes(result.phases) == {"training": 91.0, "stalled": 29.0}
    assert in_minutes(result.components) == {"effective_training": 91.0, "wasted_training": 29.0}
    assert in_minutes(result.owners) == {"ads": 91.0, "reliability": 29.0}
    assert minutes(result.level1.in_loop_overhead_us) == 29.0
    [attempt] = comp.stalls
    assert (attempt.advances, attempt.median_interval_us) == (90, MINUTE)
    assert attempt.threshold_us == 5 * MINUTE
    assert attempt.windows == ((at(61), at(90)),)
    assert attempt.stalled_since_us is None  # the job ended
    [segment] = [s for s in comp.segments if s.phase == "stalled"]
    assert (segment.start_us, segment.end_us, segment.gpus, segment.settled) == (
        at(61), at(90), 8, True)


# Worked example 2: the hang is a checkpoint save. After step 60 (minute 60) the save runs
# until minute 85 and training goes on; step 61 comes at minute 86. The gap 60..86 is a
# stall, window [61, 86): the save keeps all its 25 minutes, and only the training minute
# 85..86 inside the window is stalled.
def test_a_stall_during_a_checkpoint_save_leaves_the_save_its_time():
    job = Job(team="ads").allocated(0).phase("training", 0, 120).released(120)
    job.phase("checkpoint_save", 60, 85).checkpoint(85)
    steps(job, [float(m) for m in range(1, 61)])
    steps(job, [float(m) for m in range(86, 120)], first=61)
    result = compute(job.events).result
    assert in_minutes(result.phases) == {"training": 94.0, "checkpoint_save": 25.0,
                                         "stalled": 1.0}
    assert in_minutes(result.owners) == {"ads": 94.0, "checkpointing": 25.0,
                                         "reliability": 1.0}


# Worked example 3: a stall still going at now. Training opened at 0, steps 1..30 at
# minutes 1..30, then heartbeats keep coming every minute with step 30. The last gap runs
# from the last advance to now (the open training's end).
def still_stalled() -> Job:
    job = Job(team="ads").allocated(0).phase("training", 0, None)
    steps(job, [float(m) for m in range(1, 31)])
    for minute in range(31, 51):
        job.heartbeat(minute, attrs={"step": 30})
    return job


def test_a_stall_still_going_at_now_counts_up_to_now():
    job = still_stalled()
    # At 34 the gap (4 min) is under the 5-minute threshold: nothing is stalled yet.
    early = compute([e for e in job.events if e.ts_us <= at(34)], now=34)
    assert stalled(early) == 0 and early.result.stalled_since_us is None
    assert stalled(compute([e for e in job.events if e.ts_us <= at(36)], now=36)) == 5.0
    # From 35 on it is over: the stall starts one median interval after the last advance.
    comp = compute(job.events, now=50.5)
    result = comp.result
    assert result.state == "running"
    assert in_minutes(result.phases) == {"training": 31.0, "stalled": 19.5}
    assert result.stalled_since_us == at(31)
    # Stalled time is settled up to the last news (50); training is at risk (no checkpoint).
    settled = Counter()
    for s in comp.segments:
        settled[(s.phase, s.settled)] += s.duration_us
    assert in_minutes(settled) == {("training", False): 31.0, ("stalled", True): 19.0,
                                   ("stalled", False): 0.5}
    assert minutes(result.at_risk_us) == 31.0
    # The step comes back at 52: the stall ends there, 21 minutes long, and nothing is
    # stalled now.
    job.heartbeat(52, attrs={"step": 31})
    later = compute(job.events, now=53)
    assert stalled(later) == 21.0 and later.result.stalled_since_us is None


def test_an_open_attempt_silent_past_the_threshold_is_not_stalled_up_to_now():
    # Steps 1..30 at minutes 1..30, then nothing at all (no heartbeats): at 40 the trainer
    # has been silent 10 minutes, over the 5-minute threshold. Silence is not a hang (it may
    # be an outage of the collector), so the stall stops at the last news (30): no gap
    # from the last advance is over the threshold, nothing is stalled, and nothing is
    # stalled now. Heartbeats without advances until 40 would make it a stall (above).
    job = Job(team="ads").allocated(0).phase("training", 0, None)
    steps(job, [float(m) for m in range(1, 31)])
    comp = compute(job.events, now=40)
    assert comp.result.state == "running"
    assert stalled(comp) == 0 and comp.result.stalled_since_us is None
    # Silent for less than the threshold after a stall already under way: still counted
    # to now (the heartbeats stopped at 36, now is 39).
    for minute in range(31, 37):
        job.heartbeat(minute, attrs={"step": 30})
    assert stalled(compute(job.events, now=39)) == 8.0


def test_a_save_deadlocked_at_now_is_a_stall_in_progress_that_keeps_its_time():
    # Steps to 30, a save starts at 30.5 inside the open training and never ends; the
    # heartbeats go on. Nothing is training after 30.5, so nothing is stalled, but the job
    # is stalled now (the alert's condition) from 31.
    job = Job(team="ads").allocated(0).phase("training", 0, None)
    steps(job, [float(m) for m in range(1, 31)])
    job.phase("checkpoint_save", 30.5, None)
    for minute in range(31, 45):
        job.heartbeat(minute, attrs={"step": 30})
    comp = compute(job.events, now=45)
    assert in_minutes(comp.result.phases) == {"training": 30.5, "checkpoint_save": 14.5}
    assert comp.result.stalled_since_us == at(31)


def test_a_long_final_checkpoint_after_training_is_not_a_stall():
    job = Job(team="ads").allocated(0).phase("training", 0, 30)
    steps(job, [float(m) for m in range(1, 31)])
    job.phase("final_checkpoint", 30, None)
    for minute in range(31, 45):
        job.heartbeat(minute, attrs={"step": 30})
    comp = compute(job.events, now=45)
    assert comp.result.stalled_since_us is None and stalled(comp) == 0


# Worked example 4: a restart that resumes at step 1200 and no checkpoint was reported.
# Attempt 0 trains from 0 and reaches step 100 x m at minute m (1..20); an infra failure at
# 20.5; released at 21. Attempt 1 loads a checkpoint 22..25 and its first step is 1200:
# the state at step 1200 was saved, and attempt 0 first reached 1200 at minute 12. So S is
# 12: training 0..12 is effective, 12..20.5 is lost progress (8.5 min), not all 20.5.
def restart_at_1200(*, checkpoint_at: float | None = None) -> Job:
    job = Job(team="ads").allocated(0).phase("training", 0, None)
    job.failure(20.5).released(21, reason="failed")
    steps(job, [float(m) for m in range(1, 21)], first=100, per=100)
    if checkpoint_at is not None:
        job.add("checkpoint", checkpoint_at, attrs={"snapshot_ts": at(checkpoint_at) / 1e6})
    job.allocated(22, attempt=1).phase("checkpoint_load", 22, 25, attempt=1)
    job.phase("training", 25, 40, attempt=1).released(40, attempt=1)
    steps(job, [float(m) for m in range(25, 41)], first=1200, per=100, attempt=1)
    return job


def test_a_restart_at_step_1200_without_a_checkpoint_infers_the_snapshot():
    result = compute(restart_at_1200().events).result
    assert in_minutes(result.phases) == {"training": 27.0, "lost_progress": 8.5,
                                         "unattributed": 0.5, "checkpoint_load": 3.0}
    assert result.diagnostics.snapshot_from_steps == (0,)
    assert minutes(result.level1.ttr_us[0]) == 8.5 + 0.5 + 3  # lost, after F, the load


def test_a_reported_checkpoint_wins_over_the_steps():
    result = compute(restart_at_1200(checkpoint_at=5).events).result
    assert minutes(result.phases["lost_progress"]) == 15.5
    assert result.diagnostics.snapshot_from_steps == ()


def test_without_steps_all_of_the_interrupted_training_is_lost():
    events = [e for e in restart_at_1200().events if e.type != "heartbeat"]
    result = compute(events).result
    assert minutes(result.phases["lost_progress"]) == 20.5


def test_the_silent_tail_of_a_dead_trainer_is_not_a_stall():
    # Steps a minute to minute 30, then nothing: the trainer was killed. Attempt 1 starts at
    # 40; attempt 0 ends there (lost). 30..40 is silence, lost progress, not a stall.
    job = Job(team="ads").allocated(0).phase("training", 0, None)
    steps(job, [float(m) for m in range(1, 31)])
    job.allocated(40, attempt=1).phase("training", 40, 50, attempt=1).released(50, attempt=1)
    result = compute(job.events).result
    assert stalled(compute(job.events)) == 0
    assert minutes(result.phases["lost_progress"]) == 40.0  # no checkpoint, no step in 1


def test_fewer_than_ten_advances_get_no_detection_and_say_so():
    job = Job(team="ads").allocated(0).phase("training", 0, 120).released(120)
    steps(job, [1, 2, 3, 4, 5, 6, 7, 8, 100])  # nine advances, a 92-minute gap
    comp = compute(job.events)
    assert stalled(comp) == 0
    assert comp.result.diagnostics.few_advances_attempts == (0,)
    assert comp.stalls[0].threshold_us is None


def test_steps_that_go_back_are_not_advances():
    job = Job(team="ads").allocated(0).phase("training", 0, 120).released(120)
    steps(job, [float(m) for m in range(1, 61)])
    for minute in range(61, 90):
        job.heartbeat(minute, attrs={"step": 3})  # a restarted counter, not progress
    steps(job, [float(m) for m in range(90, 120)], first=61)
    assert stalled(compute(job.events)) == 29.0


def test_other_ranks_steps_do_not_count():
    job = stall_inside_training()
    for minute in range(61, 90):
        job.add("heartbeat", minute, rank=1, attrs={"step": 1000 + minute})
    assert stalled(compute(job.events)) == 29.0


def test_floor_factor_and_owner_come_from_the_taxonomy():
    mapping = dict(DEFAULT_MAPPING, stall_floor=1800, stall_factor=2, stall_owner=None)
    taxonomy = Taxonomy.from_mapping(mapping)
    assert compute(stall_inside_training().events, taxonomy=taxonomy).stalls[0].threshold_us == (
        30 * MINUTE)
    # The 30-minute gap is not over a 30-minute threshold; a 25-minute floor makes it one,
    # owned by the model's team.
    mapping["stall_floor"] = 1500
    comp = compute(stall_inside_training().events, taxonomy=Taxonomy.from_mapping(mapping))
    assert in_minutes(comp.result.owners) == {"ads": 120.0}
    assert stalled(comp) == 29.0
    assert stalled(compute(stall_inside_training().events, taxonomy=taxonomy)) == 0


@pytest.mark.parametrize(("key", "value", "problem"), [
    ("stall_floor", 0, "positive number"),
    ("stall_factor", "5", "positive number"),
    ("stall_factor", True, "positive number"),
    ("stall_floor", float("inf"), "finite"),
    ("stall_owner", "", "non-empty string"),
])
def test_bad_stall_settings_name_the_key(key, value, problem):
    with pytest.raises(TaxonomyError, match=problem) as caught:
        Taxonomy.from_mapping(dict(DEFAULT_MAPPING, **{key: value}))
    assert caught.value.path == (key,)


def test_stalled_is_derived_and_cannot_be_mapped():
    mapping = dict(DEFAULT_MAPPING)
    mapping["components"] = dict(mapping["components"])
    mapping["components"]["wasted_training"] = {"owner": "x", "phases": ["stalled"]}
    with pytest.raises(TaxonomyError, match="derived"):
        Taxonomy.from_mapping(mapping)


# Properties: jobs from the plausible strategy, with rank-0 steps added at generated
# instants (regular runs broken by long gaps, sometimes going back).
@st.composite
def stepped_streams(draw: st.DrawFn):
    events, now_us, timeout_us = draw(plausible_streams())
    out = list(events)
    by_attempt: dict[int, list[int]] = {}
    for event in events:
        by_attempt.setdefault(event.attempt, []).append(event.ts_us)
    step = draw(st.integers(0, 5))
    for attempt, instants in sorted(by_attempt.items()):
        t = min(instants) + draw(st.integers(0, 10 * MINUTE))
        for _ in range(draw(st.integers(0, 40))):
            t += draw(st.one_of(st.integers(0, MINUTE), st.integers(0, 60 * MINUTE)))
            step += draw(st.sampled_from([0, 1, 1, 1, 5, -2]))
            out.append(Event(f"s{len(out):05d}", t, "job", attempt, "m", "heartbeat",
                             rank=draw(st.sampled_from([None, 0, 0, 1])),
                             attrs={"step": max(step, 0)}))
    return out, now_us, timeout_us


def run(stream, taxonomy: Taxonomy | None = None):
    events, now_us, timeout_us = stream
    return compute_job(events, taxonomy=taxonomy or Taxonomy.default(), now_us=now_us,
                       heartbeat_timeout_us=timeout_us)


SMALL = Taxonomy.from_mapping(dict(DEFAULT_MAPPING, stall_floor=60, stall_factor=2))


@FAST
@given(stepped_streams(), st.sampled_from([None, SMALL]))
def test_with_steps_components_tile_held_time_and_the_level1_identity_holds(stream, taxonomy):
    comp = run(stream, taxonomy)
    result = comp.result
    for attempt in result.attempts:
        cursor = attempt.allocated_at_us
        for s in (s for s in comp.segments if s.attempt == attempt.attempt):
            assert s.start_us == cursor < s.end_us
            cursor = s.end_us
        assert cursor - attempt.allocated_at_us == attempt.held_us
    assert sum(result.components.values()) == result.held_us
    assert sum(result.phases.values()) == result.held_us
    assert sum(result.owners.values()) == result.held_us
    level1 = result.level1
    assert level1.total_us == result.held_us
    assert level1.effective_us == result.effective_us
    assert 0 <= result.at_risk_us <= result.effective_us


HUGE = Taxonomy.from_mapping(dict(DEFAULT_MAPPING, stall_floor=10**9))


def _label_at(comp, attempt: int, instant: int) -> tuple[str, str]:
    for s in comp.segments:
        if s.attempt == attempt and s.start_us <= instant < s.end_us:
            return s.phase, s.owner
    raise AssertionError((attempt, instant))


@FAST
@given(stepped_streams())
def test_stalled_time_only_ever_replaces_training(stream):
    # The same events with detection (SMALL) and without (a floor no gap reaches): at every
    # instant the labels agree, except where one says stalled and the other training or
    # lost progress. Reported phases inside a stall keep their time.
    on, off = run(stream, SMALL), run(stream, HUGE)
    assert "stalled" not in off.result.phases
    assert on.result.held_us == off.result.held_us
    for attempt in on.result.attempts:
        bounds = sorted({b for c in (on, off) for s in c.segments if s.attempt == attempt.attempt
                         for b in (s.start_us, s.end_us)})
        for lo in bounds[:-1]:
            phase_on, owner_on = _label_at(on, attempt.attempt, lo)
            phase_off, owner_off = _label_at(off, attempt.attempt, lo)
            if phase_on == "stalled":
                assert phase_off in ("training", "lost_progress")
                assert owner_on == "reliability"
            else:
                assert (phase_on, owner_on) == (phase_off, owner_off)


@FAST
@given(plausible_streams(), st.sampled_from([SMALL, Taxonomy.from_mapping(
    dict(DEFAULT_MAPPING, stall_floor=1, stall_factor=0.5, stall_owner=None))]))
def test_a_job_without_steps_is_computed_as_before(stream, taxonomy):
    # Steps taken out (the plausible streams put some on checkpoints): nothing derived
    # from steps appears, and no stall setting changes anything (the worked example and the
    # scenario tests pin the figures themselves, unchanged).
    events, now_us, timeout_us = stream
    plain = [e._replace(attrs={k: v for k, v in e.attrs.items() if k != "step"}) for e in events]
    default = run((plain, now_us, timeout_us))
    assert "stalled" not in default.result.phases
    assert default.result.diagnostics.snapshot_from_steps == ()
    assert default.result.diagnostics.few_advances_attempts == ()
    assert default.result.to_wire()["progress"] == []
    other = run((plain, now_us, timeout_us), taxonomy)
    assert other.segments == default.segments
    assert other.result == default.result
