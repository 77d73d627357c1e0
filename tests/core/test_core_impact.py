"""Impact arithmetic (ett_core.impact): hand-derived cohorts and properties."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from fractions import Fraction

import pytest
from core_strategies import streams
from hypothesis import given, settings
from hypothesis import strategies as st

from ett_core import Event, Taxonomy, compute_job
from ett_core.impact import (
    OVERHEAD_TERMS,
    SHRINKABLE,
    Cohort,
    cohort_of,
    impact,
    job_impact,
    job_labels,
    savings_us,
    whatif,
)
from ett_core.taxonomy import COMPONENTS

TAXONOMY = Taxonomy.default()
FAST = settings(max_examples=200, deadline=None)
S = 1_000_000  # microseconds per second


def terms(**cells: dict[str, int]) -> dict[str, dict[str, int]]:
    """Overhead GPU-microseconds from GPU-seconds given per term."""
    out = {t: dict.fromkeys(COMPONENTS, 0) for t in OVERHEAD_TERMS}
    for term, by_component in cells.items():
        for component, seconds in by_component.items():
            out[term][component] = seconds * S
    return out


# Baseline: E = 1000 GPU-s; overhead tts 300 (sched 50, init 100, comp 150), ttr 500
# (init 100, comp 200, wasted 200), in-loop 100 (unattributed), final shutdown 100:
# held = 1000 + 300 + 500 + 100 + 100 = 2000, ETT 0.5. 2 jobs, 4 failures; plain TTS sum
# 200 s (mean 100 s), plain TTR sum 400 s (mean 100 s).
BASELINE = Cohort(
    jobs=2, running_excluded=0, held_gpu_us=2000 * S, effective_gpu_us=1000 * S, nof=4,
    tts_us=200 * S, ttr_us=400 * S,
    overhead_gpu_us=terms(
        tts={"scheduling": 50, "initialization": 100, "compilation": 150},
        ttr={"initialization": 100, "compilation": 200, "wasted_training": 200},
        in_loop_overhead={"unattributed": 100},
        final_shutdown={"shutdown": 100}),
)
# Candidate: twice the useful work, E = 2000 GPU-s; tts 200 (sched 100, init 50, comp 50),
# ttr 500 (init 100, comp 100, wasted 300), in-loop 300 (a regression), shutdown 100:
# held = 2000 + 200 + 500 + 300 + 100 = 3100, ETT 2000/3100 = 0.645161...
# 2 jobs (one more still running), 4 failures; TTS sum 120 s (mean 60), TTR sum 320 (mean 80).
CANDIDATE = Cohort(
    jobs=2, running_excluded=1, held_gpu_us=3100 * S, effective_gpu_us=2000 * S, nof=4,
    tts_us=120 * S, ttr_us=320 * S,
    overhead_gpu_us=terms(
        tts={"scheduling": 100, "initialization": 50, "compilation": 50},
        ttr={"initialization": 100, "compilation": 100, "wasted_training": 300},
        in_loop_overhead={"unattributed": 300},
        final_shutdown={"shutdown": 100}),
)


def test_hand_derived_impact_of_two_cohorts() -> None:
    doc = impact(BASELINE, CANDIDATE)
    s = doc["savings"]
    # savings = O_B * E_C / E_B - O_C = 2 * O_B - O_C, per cell:
    # tts: sched 100-100 = 0, init 200-50 = 150, comp 300-50 = 250 -> 400
    # ttr: init 200-100 = 100, comp 400-100 = 300, wasted 400-300 = 100 -> 500
    # in-loop: unattributed 200-300 = -100 (the regression); final: shutdown 200-100 = 100
    assert s["by_term_component"]["tts"] == {**dict.fromkeys(COMPONENTS, 0.0),
                                             "initialization": 150.0, "compilation": 250.0}
    assert s["by_term_component"]["ttr"]["compilation"] == 300.0
    assert s["by_term_component"]["in_loop_overhead"]["unattributed"] == -100.0
    assert s["by_term"] == {"tts": 400.0, "ttr": 500.0, "in_loop_overhead": -100.0,
                            "final_shutdown": 100.0}
    # total 900 = E_C * (1/ETT_B - 1/ETT_C) = 2000 * (2 - 3100/2000) = 4000 - 3100
    assert s["total_gpu_seconds"] == 900.0
    assert s["by_component"] == {"scheduling": 0.0, "initialization": 250.0,
                                 "compilation": 550.0, "effective_training": 0.0,
                                 "wasted_training": 100.0, "shutdown": 100.0,
                                 "unattributed": -100.0}
    assert doc["recovery_share"] == pytest.approx(500 / 900)  # 0.5556
    # direct: tts over S = 0 + 150 + 250 = 400; cascade adds ttr over S = 100 + 300
    assert doc["startup_credit"] == {"direct": pytest.approx(400 / 900),
                                     "cascade": pytest.approx(800 / 900)}
    # (100 - 80) / (100 - 60) = 0.5: TTR fell half as much as TTS
    assert doc["ttr_to_tts_reduction"] == 0.5
    assert doc["delta_ett_pp"] == pytest.approx(100 * (2000 / 3100 - 0.5))  # +14.516
    assert doc["candidate"]["running_excluded"] == 1
    assert doc["baseline"]["mean_tts_seconds"] == 100.0
    assert doc["candidate"]["mean_ttr_seconds"] == 80.0
    assert doc["baseline"]["overhead_gpu_seconds"]["tts"]["compilation"] == 150.0


def test_a_regression_saves_a_negative_amount() -> None:
    # Swapped: E_C = 1000, ETT_B = 2000/3100: total = 1000 * (3100/2000 - 2) = -450
    doc = impact(CANDIDATE, BASELINE)
    assert doc["savings"]["total_gpu_seconds"] == -450.0
    assert doc["delta_ett_pp"] == pytest.approx(-14.516129, abs=1e-6)
    # ttr: O_B/2 - O_C per cell = (250 - 500) = -250 over -450 -> 0.5556 again
    assert doc["recovery_share"] == pytest.approx(-250 / -450)


def test_an_empty_cohort_gives_nulls_not_errors() -> None:
    empty = cohort_of([])
    doc = impact(BASELINE, empty)
    assert doc["candidate"]["jobs"] == 0
    assert doc["candidate"]["ett_ratio"] is None
    assert doc["candidate"]["mean_tts_seconds"] is None
    assert doc["delta_ett_pp"] is None
    assert doc["savings"]["total_gpu_seconds"] is None
    assert set(doc["savings"]["by_term"].values()) == {None}
    assert doc["recovery_share"] is None
    assert doc["startup_credit"] == {"direct": None, "cascade": None}
    assert doc["ttr_to_tts_reduction"] is None
    assert whatif(empty, "compilation", 0.5)["projected_ett_ratio"] == {"direct": None,
                                                                        "cascade": None}


def test_equal_mean_tts_or_no_failures_make_the_ratio_null() -> None:
    same_tts = Cohort(**{**_fields(CANDIDATE), "tts_us": 200 * S})  # mean TTS 100 = B's
    assert impact(BASELINE, same_tts)["ttr_to_tts_reduction"] is None
    no_failures = Cohort(**{**_fields(CANDIDATE), "nof": 0, "ttr_us": 0})
    assert impact(BASELINE, no_failures)["ttr_to_tts_reduction"] is None


def _fields(c: Cohort) -> dict:
    return {f: getattr(c, f) for f in Cohort.__dataclass_fields__}


def test_hand_derived_whatif() -> None:
    # compilation halved: direct 0.5 * 150 = 75 GPU-s, cascade 0.5 * (150 + 200) = 175
    doc = whatif(BASELINE, "compilation", 0.5)
    assert doc["gpu_seconds_saved"] == {"direct": 75.0, "cascade": 175.0}
    assert doc["projected_ett_ratio"]["direct"] == pytest.approx(1000 / 1925)  # 0.5195
    assert doc["projected_ett_ratio"]["cascade"] == pytest.approx(1000 / 1825)  # 0.5479
    assert doc["ett_ratio"] == 0.5
    with pytest.raises(ValueError, match="component"):
        whatif(BASELINE, "effective_training", 0.5)
    with pytest.raises(ValueError, match="reduction"):
        whatif(BASELINE, "compilation", 1.5)


counts = st.integers(min_value=0, max_value=10**13)


@st.composite
def cohorts(draw: st.DrawFn) -> Cohort:
    overhead = {t: {c: draw(counts) for c in COMPONENTS} for t in OVERHEAD_TERMS}
    effective = draw(counts)
    held = effective + sum(v for by_c in overhead.values() for v in by_c.values())
    nof = draw(st.integers(0, 50))
    return Cohort(jobs=draw(st.integers(0, 100)), held_gpu_us=held, effective_gpu_us=effective,
                  nof=nof, tts_us=draw(counts), ttr_us=draw(counts) if nof else 0,
                  overhead_gpu_us=overhead)


@FAST
@given(cohorts(), cohorts())
def test_savings_sum_to_the_ett_identity(b: Cohort, c: Cohort) -> None:
    saved = savings_us(b, c)
    if not b.effective_gpu_us or not c.effective_gpu_us:
        assert saved is None
        assert impact(b, c)["savings"]["total_gpu_seconds"] is None
        return
    total = sum(v for by_c in saved.values() for v in by_c.values())
    # sum(savings) = E_C * (1/ETT_B - 1/ETT_C), exactly
    assert total == c.effective_gpu_us * (1 / b.ett - 1 / c.ett)
    doc = impact(b, c)
    assert doc["savings"]["total_gpu_seconds"] == float(total / S)
    assert sum(doc["savings"]["by_term"].values()) == pytest.approx(
        doc["savings"]["total_gpu_seconds"], rel=1e-9, abs=1e-6)


@FAST
@given(cohorts(), st.sampled_from(SHRINKABLE))
def test_whatif_zero_changes_nothing_and_direct_never_exceeds_cascade(c: Cohort, comp: str):
    none = whatif(c, comp, 0)
    assert none["projected_ett_ratio"] == {"direct": none["ett_ratio"],
                                           "cascade": none["ett_ratio"]}
    assert none["gpu_seconds_saved"] == {"direct": 0.0, "cascade": 0.0}
    for r in (0.25, 0.5, 1.0):
        doc = whatif(c, comp, r)
        assert doc["gpu_seconds_saved"]["direct"] <= doc["gpu_seconds_saved"]["cascade"]


def run(stream):
    events, now_us, timeout_us = stream
    return compute_job(events, taxonomy=TAXONOMY, now_us=now_us, heartbeat_timeout_us=timeout_us)


@FAST
@given(streams)
def test_gpu_breakdown_matches_the_segments_and_whatif_one_sums_to_the_overhead(stream):
    comp = run(stream)
    result = comp.result
    gpu = result.level1.gpu_breakdown
    per_component: Counter = Counter()
    for segment in comp.segments:
        per_component[segment.component] += segment.gpu_us
    for component in COMPONENTS:
        assert sum(gpu[t][component] for t in gpu) == per_component[component]
    one = job_impact(result)
    assert one.held_gpu_us == sum(per_component.values())
    cohort = cohort_of([replace(one, running=False)])
    # Every overhead component shrunk fully, one at a time: the cascade savings add up to
    # held minus effective (useful training appears in no overhead term).
    saved = sum(Fraction(whatif(cohort, c, 1)["gpu_seconds_saved"]["cascade"]) * S
                for c in SHRINKABLE)
    assert saved == pytest.approx(cohort.held_gpu_us - cohort.effective_gpu_us, abs=len(SHRINKABLE))


def test_a_jobs_labels_are_its_allocations_labels_in_attempt_order() -> None:
    def alloc(attempt: int, ts: int, attrs: dict) -> Event:
        return Event(f"e{attempt}-{ts}", ts, "j", attempt, "m", "allocated", gpus=1,
                     attrs=attrs)

    events = [
        alloc(2, 10, {"labels": {"variant": "b", "n": 3}}),  # a number: not a label
        alloc(1, 20, {"labels": {"variant": "a", "experiment": "x"}}),  # reported late
        alloc(3, 30, {"labels": ["variant"]}),  # not an object
        alloc(4, 40, {}),
        Event("h", 50, "j", 4, "m", "heartbeat", attrs={"labels": {"variant": "z"}}),
    ]
    assert job_labels(events) == {"variant": "b", "experiment": "x"}
    assert job_labels(events[3:]) == {}
