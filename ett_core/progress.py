"""Checkpoints, lost progress and at-risk training (docs/model.md section 4), and ownership.

Turns an attempt's partition into labelled pieces: training after the latest durable
snapshot becomes `lost_progress` when the attempt was interrupted, or stays training but
unsettled while the attempt is still running; time after the last news of a running attempt is
unsettled too, because a late event (or the heartbeat timeout) can still re-attribute it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ett_core.attempts import AttemptFrame
from ett_core.diagnostics import DiagnosticsBuilder
from ett_core.taxonomy import EFFECTIVE, LOST_PROGRESS, WASTED, Taxonomy
from ett_core.timeline import AttemptTimeline

# (start_us, end_us, component, phase, owner, settled)
Labelled = tuple[int, int, str, str, str, bool]


@dataclass(frozen=True, slots=True)
class Progress:
    """Where an attempt's training stops being safe."""

    # Latest snapshot made durable (before F for an interrupted attempt); None: none was.
    snapshot_us: int | None
    # Training from here on is lost (interrupted attempt), else None.
    lost_from_us: int | None
    # Training from here on is at risk (open, not interrupted attempt), else None.
    at_risk_from_us: int | None


def progress_of(
    frame: AttemptFrame, timeline: AttemptTimeline, diag: DiagnosticsBuilder
) -> Progress:
    durable = timeline.checkpoints
    if frame.failure_us is not None:
        late = [c for c in durable if c.durable_us > frame.failure_us]
        if late:
            diag.add("checkpoints_after_failure", len(late))
        durable = tuple(c for c in durable if c.durable_us <= frame.failure_us)
    snapshot = max((c.snapshot_us for c in durable), default=None)
    # With no durable snapshot the attempt restarts from where it began: all its training.
    floor = frame.start_us if snapshot is None else snapshot
    if frame.interrupted:
        return Progress(snapshot, floor, None)
    if frame.is_running:
        return Progress(snapshot, None, floor)
    return Progress(snapshot, None, None)


def label(
    frame: AttemptFrame,
    timeline: AttemptTimeline,
    progress: Progress,
    taxonomy: Taxonomy,
    model_team: str,
) -> list[Labelled]:
    """Label every piece with component, phase, owner and settledness, splitting as needed."""
    owners: dict[tuple[str, str], str] = {}
    lost_owner = (
        taxonomy.lost_progress_owner_of(frame.cause, model_team) if frame.cause is not None else ""
    )
    unsettled_from = frame.last_news_us if frame.is_running else None
    out: list[Labelled] = []
    for start, end, phase, component in timeline.pieces:
        key = (phase, component)
        owner = owners.get(key)
        if owner is None:
            owner = owners[key] = taxonomy.owner_of(phase, component, model_team)
        if component != EFFECTIVE:
            _append(out, start, end, component, phase, owner, unsettled_from)
            continue
        cut = (
            progress.lost_from_us if progress.lost_from_us is not None else progress.at_risk_from_us
        )
        if cut is None or cut >= end:
            _append(out, start, end, component, phase, owner, unsettled_from)
            continue
        if cut > start:
            _append(out, start, cut, component, phase, owner, unsettled_from)
            start = cut
        if progress.lost_from_us is not None:
            _append(out, start, end, WASTED, LOST_PROGRESS, lost_owner, unsettled_from)
        else:
            out.append((start, end, component, phase, owner, False))
    return out


def _append(
    out: list[Labelled],
    start: int,
    end: int,
    component: str,
    phase: str,
    owner: str,
    unsettled_from: int | None,
) -> None:
    if unsettled_from is None or unsettled_from >= end:
        out.append((start, end, component, phase, owner, True))
    elif unsettled_from <= start:
        out.append((start, end, component, phase, owner, False))
    else:
        out.append((start, unsettled_from, component, phase, owner, True))
        out.append((unsettled_from, end, component, phase, owner, False))
