"""A running job's computation before its cut: what ett_core.resume starts from.

Immutable: a resumed computation returns the next snapshot, never changes this one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ett_core.attempts import AttemptFrame
from ett_core.checkpoints import AttemptCheckpoints
from ett_core.events import Event
from ett_core.level1 import AttemptTerms
from ett_core.result import AttemptResult
from ett_core.segments import Segment
from ett_core.stalls import AttemptStalls
from ett_core.tail_scan import TailScan
from ett_core.taxonomy import Taxonomy
from ett_core.timeline import OpenPhase

Window = tuple[int, int]

# Step intervals before the cut are kept sorted in two parts; the small one takes the new
# ones and is merged into the large one when it outgrows this.
_SMALL_GAPS = 512

@dataclass(frozen=True, slots=True)
class Gaps:
    """Sorted step intervals (microseconds): `big` and `small`, each sorted."""

    big: tuple[int, ...] = ()
    small: tuple[int, ...] = ()

    def add(self, values: Sequence[int]) -> Gaps:
        if not values:
            return self
        small = tuple(sorted(self.small + tuple(values)))
        if len(small) > _SMALL_GAPS:
            return Gaps(tuple(sorted(self.big + small)), ())
        return Gaps(self.big, small)

    def median_with(self, more: Sequence[int]) -> int:
        """The median of these intervals and `more`, as stalls._median rounds it."""
        a, b = self.big, sorted(self.small + tuple(more))
        n = len(a) + len(b)
        middle = n // 2
        if n % 2:
            return _kth(a, b, middle)
        return (_kth(a, b, middle - 1) + _kth(a, b, middle)) // 2


def _kth(a: Sequence[int], b: Sequence[int], k: int) -> int:
    """The k-th smallest (from 0) of two sorted sequences together."""
    lo, hi = max(0, k + 1 - len(b)), min(k + 1, len(a))
    while True:
        i = (lo + hi) // 2  # how many of the k+1 smallest come from a
        j = k + 1 - i
        if i > 0 and j < len(b) and a[i - 1] > b[j]:
            hi = i - 1
        elif j > 0 and i < len(a) and b[j - 1] > a[i]:
            lo = i + 1
        else:
            return max(a[i - 1] if i > 0 else b[j - 1], b[j - 1] if j > 0 else a[i - 1])


@dataclass(frozen=True, slots=True)
class JobSnapshot:
    """A running job's computation before its cut, and what resumes it."""

    job_id: str
    model: str
    team: str
    taxonomy: Taxonomy
    heartbeat_timeout_us: int
    cut_us: int
    # The job's events at or after the cut (all in the running attempt), in order.
    tail: tuple[Event, ...]
    # The attempts before the running one, as the computation left them.
    prior_frames: tuple[AttemptFrame, ...]
    prior_terms: tuple[AttemptTerms, ...]
    prior_attempts: tuple[AttemptResult, ...]
    prior_stalls: tuple[AttemptStalls, ...]
    prior_checkpoints: tuple[AttemptCheckpoints, ...]
    prior_segments: tuple[Segment, ...]
    # The running attempt's facts.
    attempt: int
    start_us: int
    gpus: int
    allocated: bool
    # Up to which instant a new event could still name the attempt's GPUs or the job's
    # team (an earlier one changes them): None when no event may.
    gpus_until_us: int | None
    team_until_us: int | None
    # The running attempt before the cut.
    segments: tuple[Segment, ...]
    # The job's segments before the last of `segments` (the prior attempts' too), joined
    # once per cut: a resumed computation adds its own after them.
    head_segments: tuple[Segment, ...]
    terms: AttemptTerms
    first_training_us: int | None
    stack: tuple[OpenPhase, ...]
    training_open: tuple[tuple[str, int], ...]
    training_end_us: int | None
    durable: int
    max_snapshot_us: int | None
    intervals_us: tuple[int, ...]
    last_before_us: int | None  # training before the latest snapshot
    training_us: int
    blocking_save_us: int
    lost_us: int
    advances: int
    last_advance: tuple[int, int] | None
    first_step: int | None  # of the attempt's first advance, even after the cut
    gaps: Gaps
    max_gap_us: int
    median_us: int | None
    threshold_us: int | None
    gap_windows: tuple[Window, ...]  # stalls between two advances before the cut
    windows_before_cut: tuple[Window, ...]  # every stall, clipped to the cut
    # Sums over the segments before the cut (prior attempts' and this one's).
    components: tuple[tuple[str, int], ...]
    phases: tuple[tuple[str, int], ...]
    owners: tuple[tuple[str, int], ...]
    # Diagnostics of everything but the running attempt's partition after the cut and its
    # few-advances entry.
    counts: tuple[tuple[str, int], ...]
    unknown_phase_names: tuple[str, ...]
    gpus_defaulted_attempts: tuple[int, ...]
    inferred_end_attempts: tuple[int, ...]
    few_advances_attempts: tuple[int, ...]
    snapshot_from_steps: tuple[int, ...]
    # The running attempt's events from the cut scanned to the latest of them (None only
    # while the first snapshot is made): a resume whose new events all come later reads
    # only those.
    scan: TailScan | None = None

    def evolve(self, **changes: object) -> JobSnapshot:
        """A copy with `changes`: what `dataclasses.replace` gives, without its per-field
        keyword arguments (a snapshot has sixty fields and every resumed pass makes one)."""
        out = object.__new__(JobSnapshot)
        for name in JobSnapshot.__slots__:  # type: ignore[attr-defined]
            object.__setattr__(out, name, changes[name] if name in changes
                               else getattr(self, name))
        return out

    @property
    def stable_segments(self) -> int:
        """How many leading segments of the job every resumed computation repeats."""
        return len(self.prior_segments) + max(0, len(self.segments) - 1)
