from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta, timezone

import pytest
from ett_client.clock import AnchoredClock, format_rfc3339_us, to_epoch_us


def test_timestamps_are_rfc3339_utc_with_microseconds():
    assert format_rfc3339_us(1_700_000_000_000_001) == "2023-11-14T22:13:20.000001Z"
    assert format_rfc3339_us(0) == "1970-01-01T00:00:00.000000Z"


def test_the_anchored_clock_tracks_the_wall_clock_and_never_goes_back():
    clock = AnchoredClock()
    readings = [clock.now_us() for _ in range(1000)]
    assert readings == sorted(readings)
    assert abs(clock.now_us() - time.time_ns() // 1000) < 50_000


def test_a_wall_clock_step_does_not_move_the_anchored_clock(monkeypatch):
    clock = AnchoredClock()
    before = clock.now_us()
    monkeypatch.setattr(time, "time_ns", lambda: 0)  # the wall clock jumps back to 1970
    assert clock.now_us() >= before


def test_snapshot_instants_accept_seconds_and_datetimes():
    assert to_epoch_us(1.5) == 1_500_000
    assert to_epoch_us(datetime(1970, 1, 1, 0, 0, 2, 7, tzinfo=UTC)) == 2_000_007
    assert to_epoch_us(datetime(1970, 1, 1, 1, tzinfo=timezone(timedelta(hours=1)))) == 0
    assert to_epoch_us(datetime(1970, 1, 1, 0, 0, 1)) == 1_000_000  # naive means UTC
    with pytest.raises(TypeError):
        to_epoch_us("2026-01-01")  # type: ignore[arg-type]
