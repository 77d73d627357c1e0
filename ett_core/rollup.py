"""Hourly rollup: GPU-microseconds per (hour, component, phase, owner), settled apart."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from ett_core.instants import HOUR_US
from ett_core.segments import Segment

RollupKey = tuple[int, str, str, str]  # (bucket_start_us, component, phase, owner)


def split_at_hours(
    segments: Iterable[Segment], bucket_us: int = HOUR_US
) -> Iterator[tuple[int, Segment]]:
    """Yield (bucket_start_us, piece) with every piece inside one bucket (UTC-aligned)."""
    if bucket_us <= 0:
        raise ValueError("bucket_us must be positive")
    for segment in segments:
        lo = segment.start_us
        while lo < segment.end_us:
            bucket = lo - lo % bucket_us
            hi = min(segment.end_us, bucket + bucket_us)
            if lo == segment.start_us and hi == segment.end_us:
                yield bucket, segment
            else:  # the fields after end_us, as they are (cheaper than _replace)
                yield bucket, Segment(segment.attempt, lo, hi, *segment[3:])
            lo = hi


def hourly(
    segments: Iterable[Segment], bucket_us: int = HOUR_US
) -> dict[RollupKey, tuple[int, int]]:
    """Clip segments at bucket boundaries (aligned to the epoch, UTC) and sum GPU-us.

    Values are (settled_gpu_us, unsettled_gpu_us).
    """
    totals: dict[RollupKey, list[int]] = {}
    for bucket, piece in split_at_hours(segments, bucket_us):
        key = (bucket, piece.component, piece.phase, piece.owner)
        cell = totals.get(key)
        if cell is None:
            cell = totals[key] = [0, 0]
        cell[0 if piece.settled else 1] += piece.gpu_us
    return {key: (cell[0], cell[1]) for key, cell in totals.items()}
