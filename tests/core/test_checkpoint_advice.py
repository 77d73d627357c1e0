"""The checkpoint advice formulas against their published values, and their properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ett_core.checkpoint_advice import (
    Observations,
    advise,
    daly_interval,
    expected_ettr,
    young_interval,
)

MIN = 60.0
HOUR = 3600.0


@pytest.mark.parametrize(("m_s", "expected_min"), [
    # Daly (2006) with d = 5 min: sqrt(2*5*1440) = 120; d/2M = 1/288;
    # 120 * (1 + 0.0589/3 ... ) -> 120 * 1.01408 - 5 = 116.7 min.
    (24 * HOUR, 116.7),
    # sqrt(2*5*360) = 60; d/2M = 1/144: 60 * (1 + 0.02778 + 0.00077) - 5 = 56.7 min.
    (6 * HOUR, 56.7),
    # sqrt(2*5*15) = 12.247; d/2M = 1/6: 12.247 * (1 + 0.1361 + 0.0185) - 5 = 9.14 min.
    (15 * MIN, 9.14),
])
def test_daly_reproduces_the_published_intervals_for_a_five_minute_save(m_s, expected_min):
    assert daly_interval(5 * MIN, m_s) / MIN == pytest.approx(expected_min, abs=0.05)


def test_daly_checkpoints_once_per_failure_when_a_save_outlasts_twice_the_mtbf():
    assert daly_interval(3 * HOUR, 1 * HOUR) == 1 * HOUR


def test_young_is_the_square_root_of_twice_cost_times_mtbf():
    # sqrt(2 * 300 * 86400) = 7200 s: two hours.
    assert young_interval(5 * MIN, 24 * HOUR) == pytest.approx(7200.0)


def kokolis_mtbf(gpus: int, failures_per_node_day: float, gpus_per_node: int = 8) -> float:
    # 16,384 GPUs = 2,048 nodes; at 6.5e-3 failures per node-day, 13.3 failures a day:
    # M = 86400 / 13.312 = 6,490 s (108 min).
    return 86400.0 / (gpus / gpus_per_node * failures_per_node_day)


@pytest.mark.parametrize(("interval_min", "published"), [(60, 0.68), (5, 0.93)])
def test_expected_ettr_reproduces_the_published_points_of_kokolis_et_al(interval_min,
                                                                        published):
    m = kokolis_mtbf(16_384, 6.5e-3)
    # 1 - (5 + 30) / 108.2 = 0.676 at 60 min; 1 - (5 + 2.5) / 108.2 = 0.931 at 5 min.
    got = expected_ettr(interval_min * MIN, m, 0.0, 5 * MIN)
    assert got == pytest.approx(published, abs=0.006)


def test_expected_ettr_is_zero_when_restarts_outlast_the_time_between_failures():
    assert expected_ettr(60 * MIN, 30 * MIN, 0.0, 10 * MIN) == 0.0


@given(d=st.floats(1.0, 600.0), m=st.floats(1800.0, 30 * 86400.0),
       r=st.floats(0.0, 600.0), tau=st.floats(1.0, 86400.0))
def test_expected_ettr_lies_between_zero_and_one(d, m, r, tau):
    assert 0.0 <= expected_ettr(tau, m, d, r) <= 1.0


@given(d=st.floats(1.0, 600.0), ratio=st.floats(100.0, 10_000.0),
       restart_share=st.floats(0.0, 0.01))
def test_daly_is_within_half_a_point_of_the_best_interval_the_formula_allows(
        d, ratio, restart_share):
    # For d << M and R << M both optima approach sqrt(2 d M) (Daly ignores R, which
    # moves the formula's optimum by a factor sqrt(1 - R/M)): scan a fine log grid.
    m = d * ratio
    r = restart_share * m
    best = max(expected_ettr(d * 1.01 ** k, m, d, r) for k in range(1, 1400))
    assert expected_ettr(daly_interval(d, m), m, d, r) >= best - 0.005


@given(d=st.floats(0.1, 3600.0), m=st.floats(60.0, 30 * 86400.0))
def test_daly_never_exceeds_young_by_more_than_its_higher_order_terms(d, m):
    young, daly = young_interval(d, m), daly_interval(d, m)
    if d < 2 * m:
        ratio = d / (2 * m)
        assert daly == pytest.approx(young * (1 + math.sqrt(ratio) / 3 + ratio / 9) - d)
    else:
        assert daly == m


def obs(**changes: object) -> Observations:
    base = dict(window_days=30.0, held_seconds=10 * 6 * HOUR, held_gpu_hours=8 * 60.0,
                interruptions=10, blocking_save_seconds=100 * 5 * MIN,
                durable_checkpoints=100, ttr_seconds=10 * 40 * MIN,
                lost_progress_seconds=10 * 30 * MIN, observed_interval_seconds=60 * MIN)
    base.update(changes)
    return Observations(**base)  # type: ignore[arg-type]


def test_advice_from_hand_computed_observations():
    a = advise(obs())
    # M = 60 h / 10 = 6 h; d = 500 min / 100 = 5 min; R = (400 - 300) / 10 = 10 min.
    assert (a.status, a.reason) == ("ok", None)
    assert a.mtbf_seconds == 6 * HOUR
    assert a.checkpoint_cost_seconds == 5 * MIN
    assert a.restart_overhead_seconds == pytest.approx(10 * MIN)
    assert a.interval_daly / MIN == pytest.approx(56.7, abs=0.05)
    # At 60 min: (1 - (10 + 30) / 360) / (1 + 5/60) = 0.8889 / 1.0833 = 0.8205.
    assert a.ettr_observed == pytest.approx(0.8205, abs=1e-4)
    # Lost per failure: 300 / 10 = 30 min observed, 60 / 2 = 30 min expected.
    assert (a.lost_observed, a.lost_expected) == (30 * MIN, 30 * MIN)
    # Saving = (ettr(daly) - ettr(60)) * 480 GPU-h / 30 days.
    assert a.saving_gpu_hours_per_day == pytest.approx(
        (a.ettr_daly - a.ettr_observed) * 480 / 30)


@pytest.mark.parametrize(("changes", "reason_part"), [
    ({"interruptions": 2}, "at least 3"),
    ({"durable_checkpoints": 0, "blocking_save_seconds": 0.0}, "no durable checkpoints"),
    ({"blocking_save_seconds": 0.0}, "no blocking checkpoint_save time"),
    ({"held_seconds": 0.0, "interruptions": 0, "held_gpu_hours": 0.0}, "no attempts"),
])
def test_insufficient_data_says_why_and_leaves_the_advice_null(changes, reason_part):
    a = advise(obs(**changes))
    assert a.status == "insufficient_data"
    assert reason_part in a.reason
    assert (a.interval_daly, a.ettr_daly, a.saving_gpu_hours_per_day) == (None, None, None)


def test_without_an_observed_interval_the_recommendation_stands_and_the_comparison_is_null():
    a = advise(obs(observed_interval_seconds=None))
    assert a.status == "ok" and a.interval_daly is not None
    assert (a.ettr_observed, a.saving_gpu_hours_per_day) == (None, None)
    assert "observed interval is unknown" in a.reason
