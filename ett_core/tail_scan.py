"""The running attempt's events after the cut, scanned up to the latest of them: what lets a
resumed computation (ett_core.resume) read only the events that came since its last pass.

Every quantity a resumed computation takes from the events after the cut is a fold over
them in event order: the partition (its pieces, its checkpoints, the phases open), the step
advances, the training phases open and their last close, what the partition counted. A
`TailScan` is those folds stopped after the tail's latest event. Events that all come after
it continue each fold from where it stopped (`continue_scan`), which gives exactly what one
scan of all the events gives (tests/core/test_core_resume.py compares the two), so a pass
costs the events since the last one, not the half hour of them since the cut. Pure and
immutable, as the rest of the core.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from ett_core.attempts import AttemptFrame
from ett_core.diagnostics import DiagnosticsBuilder
from ett_core.stalls import advances_of, training_scan
from ett_core.taxonomy import EFFECTIVE, Taxonomy
from ett_core.timeline import AttemptTimeline, Checkpoint, OpenPhase, Piece, innermost, partition


@dataclass(frozen=True, slots=True)
class TailScan:
    """The folds over the running attempt's events from the cut to the latest of them."""

    at_us: int  # the tail's latest event, of any rank: later events continue from here
    last_news_us: int  # its latest timeline event: where the pieces stop
    pieces: tuple[Piece, ...]  # the partition from the cut to the last news
    checkpoints: tuple[Checkpoint, ...]
    stack: tuple[OpenPhase, ...]  # the phases open at the last news
    advances: tuple[tuple[int, int], ...]  # (instant, step) since the cut
    best_step: int  # the highest step reached, before the cut included (-1: none)
    last_advance_us: int | None  # the latest advance's instant, before the cut included
    # The intervals between consecutive advances since the last one before the cut, in
    # order, and the longest (0: none): what the stall rule's median and windows read.
    gaps: tuple[int, ...]
    max_gap_us: int
    training_open: tuple[tuple[str, int], ...]  # training phase -> times open
    training_end_us: int | None  # when the training phases last all closed
    counts: tuple[tuple[str, int], ...]  # what the partition counted
    unknown_phase_names: tuple[str, ...]


def scan_tail(frame: AttemptFrame, taxonomy: Taxonomy, *, stack: tuple[OpenPhase, ...],
              last_advance: tuple[int, int] | None, training_open: Sequence[tuple[str, int]],
              training_end_us: int | None, at_us: int) -> TailScan:
    """The scan of `frame.events` (the attempt's timeline events from the cut,
    `frame.start_us`, in order) from the state at the cut."""
    start = TailScan(at_us, frame.start_us, (), (), stack, (),
                     last_advance[1] if last_advance else -1,
                     last_advance[0] if last_advance else None, (), 0,
                     tuple(sorted(training_open)), training_end_us, (), ())
    return continue_scan(start, frame, taxonomy, at_us)


def continue_scan(scan: TailScan, frame: AttemptFrame, taxonomy: Taxonomy,
                  at_us: int) -> TailScan:
    """`scan` continued over `frame.events`: timeline events, in order, every one after
    `scan.at_us` (an earlier one would have changed what the scan already holds)."""
    events = frame.events
    last = events[-1].ts_us if events else scan.last_news_us
    sub = AttemptFrame(frame.attempt, scan.last_news_us, last, frame.gpus, frame.end_cause,
                       frame.is_running, frame.failure_us, frame.cause,
                       frame.failure_event_id, last, frame.allocated, events)
    diag = DiagnosticsBuilder(Counter(dict(scan.counts)), set(scan.unknown_phase_names))
    part = partition(sub, taxonomy, diag, scan.stack)
    advances = advances_of(sub, scan.best_step)
    open_phases, training_end = training_scan(sub, taxonomy, dict(scan.training_open),
                                              scan.training_end_us)
    gaps, max_gap, previous = scan.gaps, scan.max_gap_us, scan.last_advance_us
    if advances:
        instants = [t for t, _ in advances]
        more = [b - a for a, b in zip([previous, *instants], instants, strict=False)
                if a is not None]
        gaps += tuple(more)
        max_gap = max(max_gap, *more) if more else max_gap
        previous = instants[-1]
    return TailScan(
        at_us, last, join(scan.pieces, part.pieces), scan.checkpoints + part.checkpoints,
        part.open_at_end, (*scan.advances, *advances),
        advances[-1][1] if advances else scan.best_step, previous, gaps, max_gap,
        tuple(sorted(open_phases.items())), training_end, tuple(sorted(diag.counts.items())),
        tuple(sorted(diag.unknown_phase_names)))


def join(before: tuple[Piece, ...], after: Sequence[Piece]) -> tuple[Piece, ...]:
    """Pieces before and after an instant as one partition across it would have made them."""
    if before and after:
        last, first = before[-1], after[0]
        if last[1] == first[0] and last[2:] == first[2:]:
            return (*before[:-1], (last[0], first[1], *last[2:]), *after[1:])
    return (*before, *after)


def timeline_to(scan: TailScan, end_us: int,
                first_training_us: int | None = None) -> AttemptTimeline:
    """The partition from the cut to `end_us` (at or after the last news): after the last
    news the innermost phase open then owns the time, as `partition` ends.
    `first_training_us`: the attempt's first training before the cut, if any."""
    pieces = scan.pieces
    if end_us > scan.last_news_us:
        pieces = join(pieces, ((scan.last_news_us, end_us, *innermost(scan.stack)),))
    training = [p for p in pieces if p[3] == EFFECTIVE]
    if first_training_us is None and training:
        first_training_us = training[0][0]
    return AttemptTimeline(pieces, scan.checkpoints, first_training_us,
                           training[-1][1] if training else None, scan.stack)
