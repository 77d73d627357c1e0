"""Segments: the core's timeline output, the unit the aggregator rolls up into windows."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from ett_core.progress import Labelled


class Segment(NamedTuple):
    """Held time [start_us, end_us) of one attempt with one attribution.

    `settled` is False while the attribution can still change (at-risk training, time
    after the last news of a running attempt). A named tuple, as `Event` is: a recompute
    makes one per stored segment row, and cutting one (`_replace`) must stay cheap.
    """

    attempt: int
    start_us: int
    end_us: int
    gpus: int
    component: str
    phase: str
    owner: str
    settled: bool

    @property
    def duration_us(self) -> int:
        return self.end_us - self.start_us

    @property
    def gpu_us(self) -> int:
        return (self.end_us - self.start_us) * self.gpus


def to_segments(attempt: int, gpus: int, pieces: Iterable[Labelled]) -> list[Segment]:
    """Build segments, merging contiguous pieces with identical labels."""
    out: list[Segment] = []
    last: Labelled | None = None
    for piece in pieces:
        if piece[1] <= piece[0]:
            continue
        if last is not None and last[1] == piece[0] and last[2:] == piece[2:]:
            last = (last[0], piece[1], *piece[2:])  # type: ignore[assignment]
            continue
        if last is not None:
            out.append(Segment(attempt, last[0], last[1], gpus, *last[2:]))
        last = piece
    if last is not None:
        out.append(Segment(attempt, last[0], last[1], gpus, *last[2:]))
    return out
