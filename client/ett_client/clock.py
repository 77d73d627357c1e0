"""Event timestamps: wall clock anchored once, advanced by the monotonic performance counter.

Reading ``time.time()`` for every event would let an NTP step (or an operator fixing the
clock) mid-run reorder a job's events, which the service would read as phases ending before
they start. Instead we read the wall clock once per process and add the elapsed
``perf_counter_ns`` to it, so timestamps are strictly ordered as the process saw them. Integer
microseconds throughout: a float epoch only resolves about half a microsecond today.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class AnchoredClock:
    """Epoch microseconds from one wall-clock anchor plus the monotonic elapsed time."""

    __slots__ = ("_perf0_ns", "_wall0_us")

    def __init__(self) -> None:
        # Read both as close together as possible; the pair is the anchor.
        self._wall0_us = time.time_ns() // 1000
        self._perf0_ns = time.perf_counter_ns()

    def now_us(self) -> int:
        return self._wall0_us + (time.perf_counter_ns() - self._perf0_ns) // 1000


def format_rfc3339_us(epoch_us: int) -> str:
    """RFC 3339 UTC with exactly six fractional digits, e.g. ``2026-05-09T07:35:25.000123Z``."""
    seconds, micros = divmod(epoch_us, 1_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{micros:06d}Z"


def to_epoch_us(value: float | int | datetime) -> int:
    """Accept epoch seconds (float or int) or a datetime (naive means UTC) as epoch micros."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        delta = value - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected epoch seconds or a datetime, got {type(value).__name__}")
    return round(value * 1_000_000)
