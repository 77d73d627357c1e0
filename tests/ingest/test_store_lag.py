"""The group commits' lag (service/store_lag.py), the fair queue's second signal: the time
above the store's recent best, so that a database whose every commit is slow is not taken
for a busy one. Times and instants are given; nothing here depends on timing."""

from __future__ import annotations

import dataclasses

import pytest

from service.store_lag import StoreLag


def test_nothing_observed_is_not_behind() -> None:
    lag = StoreLag()
    assert (lag.lag_s, lag.floor_s, lag.behind_s) == (0.0, 0.0, 0.0)


def test_a_store_whose_every_commit_is_slow_is_not_behind() -> None:
    lag = StoreLag()
    for i in range(100):
        lag.observe(0.020, now=i * 0.01)
    assert lag.floor_s == pytest.approx(0.020)
    assert lag.behind_s == pytest.approx(0.0)


def test_commits_slower_than_the_recent_best_are_behind_by_the_difference() -> None:
    lag = StoreLag()
    for i in range(100):
        lag.observe(0.005, now=i * 0.01)
    lag.observe(0.030, now=1.5)
    assert lag.behind_s == pytest.approx(0.025)
    # One quick group does not clear it at once: half the previous figure is kept.
    lag.observe(0.005, now=1.51)
    assert lag.behind_s == pytest.approx(0.010)
    lag.observe(0.005, now=1.52)
    assert lag.behind_s == pytest.approx(0.0025)


def test_the_floor_is_the_best_of_the_current_and_the_previous_window() -> None:
    lag = StoreLag()
    window = StoreLag.WINDOW_S
    lag.observe(0.004, now=0.0)
    lag.observe(0.015, now=window + 1)  # a new window: the previous one's best still counts
    assert lag.floor_s == pytest.approx(0.004)
    lag.observe(0.015, now=2 * window + 2)  # two windows on: the old best is forgotten
    assert lag.floor_s == pytest.approx(0.015)
    assert lag.behind_s == pytest.approx(0.0)


def test_the_ingest_flow_is_behind_on_either_signal_unless_it_is_turned_off(
        app_context) -> None:
    ingestion = app_context.ingestion
    limits = ingestion.limits
    assert (limits.fair_lag_s, limits.fair_store_lag_s) == (0.010, 0.010)  # the defaults
    assert not ingestion.behind()
    ingestion.loop_lag.lag_s = 0.012
    assert ingestion.behind()
    ingestion.loop_lag.lag_s = 0.0
    store = ingestion.pool.store_lag
    store.observe(0.004, now=0.0)
    store.observe(0.020, now=1.0)  # 16 ms above the best
    assert ingestion.behind()
    # ETT_INGEST_FAIR_STORE_LAG_MS=0: not a signal
    ingestion.limits = dataclasses.replace(limits, fair_store_lag_s=0.0)
    assert not ingestion.behind()
