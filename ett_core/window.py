"""Clipping segments to a window [start_us, end_us).

The window is never shrunk to the data inside it: a window with nothing held simply
clips to no segments.
"""

from __future__ import annotations

from collections.abc import Iterable

from ett_core.segments import Segment


def clip(segments: Iterable[Segment], start_us: int, end_us: int) -> tuple[Segment, ...]:
    """The parts of `segments` inside [start_us, end_us); empty parts are dropped."""
    out = []
    for segment in segments:
        lo = max(segment.start_us, start_us)
        hi = min(segment.end_us, end_us)
        if hi <= lo:
            continue
        if lo == segment.start_us and hi == segment.end_us:
            out.append(segment)
        else:
            out.append(segment._replace(start_us=lo, end_us=hi))
    return tuple(out)
