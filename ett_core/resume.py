"""Resuming a running job's computation from its settled prefix (docs/design.md,
"Incremental passes").

A running job's answer changes only after its *cut*: an instant no later than the running
attempt's last news and its latest durable snapshot, so every labelled instant before it
is settled and stays as it is whatever arrives later (later events only add to the
attempt, `now` only moves its end). A `JobSnapshot` holds the job's computation before
the cut as sums and segments, the state of the attempt's partition at the cut (the phases
open), the events from the cut on, and their scan up to the latest of them
(ett_core.tail_scan); `resume_job` computes the rest from those events and the new ones,
continuing the scan when the new ones all come after it, and gives exactly what
`compute_job` gives for all of them (tests/core/test_core_resume.py holds it to that).
Whatever it cannot vouch for (an event before the cut, another attempt, a release, a
failure, the scheduler's word, a change of the step median that moves a stall before the
cut) makes it return None: the caller then computes the job from all its events.

Pure and immutable, as the rest of the core: `now` and the heartbeat timeout are arguments.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise
from types import MappingProxyType

from ett_core import scheduler
from ett_core.attempts import AttemptFrame, _valid_gpus
from ett_core.checkpoints import AttemptCheckpoints, _training_before
from ett_core.compute import JobComputation, JobParts, _clean
from ett_core.diagnostics import DiagnosticsBuilder
from ett_core.events import NO_ATTRS, Event, order_events
from ett_core.level1 import AttemptTerms, attempt_terms, combine
from ett_core.progress import Labelled, Progress, label
from ett_core.result import AttemptResult, JobResult
from ett_core.segments import Segment, to_segments
from ett_core.snapshot import Gaps, JobSnapshot, Window
from ett_core.stalls import (
    MAX_STEP,
    MIN_ADVANCES,
    STEP_ATTR,
    AttemptStalls,
    mark_stalled,
    training_scan,
)
from ett_core.tail_scan import TailScan, continue_scan, scan_tail, timeline_to
from ett_core.taxonomy import CHECKPOINT_SAVE, COMPONENTS, EFFECTIVE, LOST_PROGRESS, Taxonomy
from ett_core.timeline import AttemptTimeline, partition

# New events of these types end or re-frame the attempt: computed from all events.
_REFRAMING = frozenset(("allocated", "released", "failure"))
@dataclass(frozen=True, slots=True)
class _Tail:
    """The running attempt after the cut, computed once per resume."""

    events: tuple[Event, ...]
    frame: AttemptFrame
    scan: TailScan
    timeline: AttemptTimeline
    pieces: list[Labelled]
    terms: AttemptTerms
    segments: list[Segment]
    stalls: AttemptStalls
    pre_windows: tuple[Window, ...]
    snapshots: list[int]
    befores: list[int]
    diag: DiagnosticsBuilder
    floor_us: int
    first_training_us: int | None


def _add_terms(a: AttemptTerms, b: AttemptTerms) -> AttemptTerms:
    out = AttemptTerms()
    for name in ("startup", "own_recovery", "effective", "in_loop", "final_shutdown"):
        into, x, y = getattr(out, name), getattr(a, name), getattr(b, name)
        for c in into:
            into[c] = x[c] + y[c]
    return out


def _merge(before: tuple[Segment, ...], after: Sequence[Segment]) -> tuple[Segment, ...]:
    """Segments before and after the cut as to_segments would have made them in one go."""
    if before and after:
        last, first = before[-1], after[0]
        if last.end_us == first.start_us and last[3:] == first[3:]:
            return (*before[:-1], last._replace(end_us=first.end_us), *after[1:])
    return (*before, *after)


def _clip(windows: Iterable[Window], cut: int) -> tuple[Window, ...]:
    return tuple((lo, min(hi, cut)) for lo, hi in windows if lo < cut)


def _run_tail(snap: JobSnapshot, events: tuple[Event, ...], now_us: int,
              fresh: tuple[Event, ...] | None = None) -> _Tail | None:
    """The running attempt after the cut, over `events` (the whole tail, in order).
    `fresh`: the tail's events after the snapshot's scan (all later than it), which then
    continues from where it stopped instead of scanning the tail again."""
    taxonomy = snap.taxonomy
    cut = snap.cut_us
    scan = snap.scan if fresh is not None else None
    if scan is not None:
        timeline_events = tuple(e for e in fresh if e.on_timeline)  # type: ignore[union-attr]
        last_news = timeline_events[-1].ts_us if timeline_events else scan.last_news_us
    else:
        timeline_events = tuple(e for e in events if e.on_timeline)
        if not timeline_events:
            return None
        last_news = timeline_events[-1].ts_us
    if now_us - last_news > snap.heartbeat_timeout_us or last_news < cut:
        return None  # no longer running: framed from all events
    end = max(now_us, last_news)
    frame = AttemptFrame(snap.attempt, snap.start_us, end, snap.gpus, "running", True, None,
                         None, None, last_news, snap.allocated, ())
    sub = AttemptFrame(snap.attempt, cut, end, snap.gpus, "running", True, None, None, None,
                       last_news, snap.allocated, timeline_events)
    if scan is not None:
        scan = continue_scan(scan, sub, taxonomy, events[-1].ts_us)
    else:
        scan = scan_tail(sub, taxonomy, stack=snap.stack, last_advance=snap.last_advance,
                         training_open=snap.training_open,
                         training_end_us=snap.training_end_us, at_us=events[-1].ts_us)
    diag = DiagnosticsBuilder(Counter(dict(scan.counts)), set(scan.unknown_phase_names))
    if any(c.snapshot_us < cut for c in scan.checkpoints):
        return None  # a snapshot before the cut re-cuts the training before it
    timeline = timeline_to(scan, end, snap.first_training_us)
    first_training = timeline.first_training_us
    snapshot = max((c.snapshot_us for c in timeline.checkpoints), default=snap.max_snapshot_us)
    floor = snap.start_us if snapshot is None else snapshot
    if floor < cut:
        return None
    pieces = label(frame, timeline, Progress(snapshot, None, floor), taxonomy, snap.team)

    advances = scan.advances
    count = snap.advances + len(advances)
    # The first advance before the cut stays; after it, an event that came late may be it.
    first_step = snap.first_step if snap.advances else (
        advances[0][1] if advances else None)
    if snap.prior_frames and first_step != snap.first_step:
        return None  # the attempt before restarted from another step
    last = advances[-1] if advances else snap.last_advance
    median = threshold = since = None
    pre: tuple[Window, ...] = ()
    later: list[Window] = []
    if count < MIN_ADVANCES:
        if count:
            diag.few_advances_attempts.append(snap.attempt)
    else:
        median = snap.gaps.median_with(scan.gaps)
        threshold = max(taxonomy.stall_floor_us, int(taxonomy.stall_factor * median))
        if (median, threshold) == (snap.median_us, snap.threshold_us):
            pre = snap.gap_windows
        elif snap.max_gap_us > threshold:
            return None  # a stall before the cut may come or go
        training_end = scan.training_end_us
        if any(n for _, n in scan.training_open):
            training_end = end
        if training_end is not None and training_end - last_news > threshold:
            training_end = min(training_end, last_news)
        if scan.max_gap_us > threshold:  # else no interval between advances is a stall
            points = ([snap.last_advance[0]] if snap.last_advance else []) + [
                t for t, _ in advances]
            later = [(s + median, e) for s, e in pairwise(points) if e - s > threshold]
        final = scan.last_advance_us
        assert final is not None  # enough advances for a median
        if training_end is not None and training_end - final > threshold:
            later.append((final + median, training_end))
        windows = pre + tuple(later)
        since = (windows[-1][0] if windows and training_end == end
                 and windows[-1][1] == training_end else None)
    if pre + _clip(later, cut) != snap.windows_before_cut:
        return None  # stalls before the cut moved
    stalls = AttemptStalls(snap.attempt, count, last[1] if last else None,
                           last[0] if last else None, median, threshold, pre + tuple(later),
                           since)
    if later:  # the stalls before the cut are in the snapshot's segments already
        owner = taxonomy.stall_owner_of(snap.team)
        pieces = mark_stalled(frame, pieces, replace(stalls, windows=tuple(later)), owner)
    terms = attempt_terms(frame, timeline, pieces)
    snapshots = sorted({c.snapshot_us for c in timeline.checkpoints})
    training = [p for p in timeline.pieces if p[3] == EFFECTIVE]
    befores = [snap.training_us + b for b in _training_before(training, snapshots)]
    return _Tail(events, frame, scan, timeline, pieces, terms,
                 to_segments(snap.attempt, snap.gpus, pieces), stalls, pre,
                 snapshots, befores, diag, floor, first_training)


def _computation(snap: JobSnapshot, tail: _Tail, extra: Counter[str]) -> JobComputation:
    frame = tail.frame
    terms = _add_terms(snap.terms, tail.terms)
    components = dict(snap.components)
    phases = dict(snap.phases)
    owners = dict(snap.owners)
    at_risk = 0
    for s in tail.segments:
        d = s.end_us - s.start_us
        components[s.component] += d
        phases[s.phase] = phases.get(s.phase, 0) + d
        owners[s.owner] = owners.get(s.owner, 0) + d
        if not s.settled and s.component == EFFECTIVE:
            at_risk += d
    attempt = AttemptResult(snap.attempt, snap.start_us, None, snap.gpus, "running",
                            frame.held_us, sum(terms.startup.values()), None, at_risk, None)
    frames = (*snap.prior_frames, frame)
    level1 = combine(frames, (*snap.prior_terms, terms))
    ttr = dict(zip(level1.ttr_attempts, level1.ttr_us, strict=True))
    checkpoints = tuple(c if c.ttr_us == (ttr_us := ttr.get(c.attempt) if c.interrupted
                                          else None) else replace(c, ttr_us=ttr_us)
                        for c in snap.prior_checkpoints)
    befores = ([snap.last_before_us] if snap.last_before_us is not None else []) + tail.befores
    more = tuple(b - a for a, b in pairwise(befores) if b > a)
    # The same tuple when nothing was added: the aggregator then sees by identity that
    # an old job's long list of intervals is unchanged.
    intervals = snap.intervals_us + more if more else snap.intervals_us
    pieces = tail.timeline.pieces
    checkpoints += (AttemptCheckpoints(
        snap.attempt, snap.start_us, snap.gpus, frame.held_us, False,
        snap.blocking_save_us + sum(p[1] - p[0] for p in pieces if p[2] == CHECKPOINT_SAVE),
        snap.durable + len(tail.timeline.checkpoints), intervals,
        snap.lost_us + sum(p[1] - p[0] for p in tail.pieces if p[3] == LOST_PROGRESS), None),)
    diag = _diagnostics(snap, extra + tail.diag.counts if extra else tail.diag.counts,
                        tail.diag)
    stalls = (*snap.prior_stalls, tail.stalls)
    result = JobResult(
        job_id=snap.job_id, model=snap.model, team=snap.team, state="running",
        attempts=(*snap.prior_attempts, attempt),
        held_us=sum(f.held_us for f in frames),
        effective_us=components[EFFECTIVE], at_risk_us=at_risk,
        components=MappingProxyType(components), phases=MappingProxyType(phases),
        owners=MappingProxyType(owners), level1=level1, diagnostics=diag.freeze(),
        stalls=stalls, queue_us=0)
    return JobComputation(result=result,
                          segments=snap.head_segments + _merge(snap.segments[-1:],
                                                               tail.segments),
                          checkpoints=checkpoints, stalls=stalls)


def _diagnostics(snap: JobSnapshot, counts: Counter[str],
                 tail: DiagnosticsBuilder) -> DiagnosticsBuilder:
    diag = DiagnosticsBuilder()
    diag.counts = Counter(dict(snap.counts)) + counts if counts else Counter(dict(snap.counts))
    diag.unknown_phase_names = set(snap.unknown_phase_names) | tail.unknown_phase_names
    diag.gpus_defaulted_attempts = list(snap.gpus_defaulted_attempts)
    diag.inferred_end_attempts = list(snap.inferred_end_attempts)
    diag.few_advances_attempts = [*snap.few_advances_attempts, *tail.few_advances_attempts]
    diag.snapshot_from_steps = list(snap.snapshot_from_steps)
    return diag


def _advance(snap: JobSnapshot, tail: _Tail, extra: Counter[str]) -> JobSnapshot:
    """The snapshot at the latest cut this computation allows (never before the old one)."""
    frame = tail.frame
    cut = max(snap.cut_us, min(tail.floor_us, frame.last_news_us))
    stalls = tail.stalls
    first_step = snap.first_step if snap.advances else (
        tail.scan.advances[0][1] if tail.scan.advances else None)
    if cut == snap.cut_us:
        # Nothing before the cut changed (no save is open at it, and no later checkpoint's
        # snapshot lies before it, or the tail would have declined): only what the tail
        # carries moves on.
        return snap.evolve(
            tail=tail.events, scan=tail.scan, first_step=first_step,
            median_us=stalls.median_interval_us, threshold_us=stalls.threshold_us,
            gap_windows=tail.pre_windows if stalls.median_interval_us is not None else (),
            counts=tuple((Counter(dict(snap.counts)) + extra).items()) if extra
            else snap.counts)
    timeline_events = tuple(e for e in tail.events if e.on_timeline)
    while True:
        events = tuple(e for e in timeline_events if e.ts_us < cut)
        diag = DiagnosticsBuilder()
        sub = replace(frame, start_us=snap.cut_us, end_us=cut, events=events)
        timeline = partition(sub, snap.taxonomy, diag, snap.stack)
        # A save open at the cut would give a later checkpoint a snapshot before it, as
        # would a later checkpoint's own snapshot_ts.
        earlier = [p.start_us for p in timeline.open_at_end if p.phase == CHECKPOINT_SAVE]
        earlier += [c.snapshot_us for c in tail.timeline.checkpoints if c.durable_us >= cut]
        if not earlier or min(earlier) >= cut:
            break
        cut = max(snap.cut_us, min(earlier))
    pieces = [(s, min(e, cut), *rest) for s, e, *rest in tail.pieces if s < cut]
    segments = to_segments(snap.attempt, snap.gpus, pieces)  # type: ignore[arg-type]
    components, phases, owners = dict(snap.components), dict(snap.phases), dict(snap.owners)
    for s in segments:
        d = s.end_us - s.start_us
        components[s.component] += d
        phases[s.phase] = phases.get(s.phase, 0) + d
        owners[s.owner] = owners.get(s.owner, 0) + d
    open_phases, training_end = training_scan(sub, snap.taxonomy, dict(snap.training_open),
                                              snap.training_end_us)
    # The checkpoints durable before the cut (their snapshots are before it too).
    durable = timeline.checkpoints
    before_of = dict(zip(tail.snapshots, tail.befores, strict=True))
    known = [before_of[s] for s in sorted({c.snapshot_us for c in durable})]
    befores = ([snap.last_before_us] if snap.last_before_us is not None else []) + known
    training = sum(p[1] - p[0] for p in timeline.pieces if p[3] == EFFECTIVE)
    advances = [a for a in tail.scan.advances if a[0] < cut]
    points = ([snap.last_advance[0]] if snap.last_advance else []) + [t for t, _ in advances]
    gaps = [b - a for a, b in pairwise(points)]
    last_advance = advances[-1] if advances else snap.last_advance
    gap_windows: tuple[Window, ...] = ()
    if stalls.median_interval_us is not None:
        median, threshold = stalls.median_interval_us, stalls.threshold_us
        assert threshold is not None
        gap_windows = tail.pre_windows + tuple(
            (s + median, e) for s, e in pairwise(points) if e - s > threshold)
    counts = Counter(dict(snap.counts)) + extra + diag.counts
    merged = _merge(snap.segments, segments)
    after = tuple(e for e in timeline_events if e.ts_us >= cut)
    scan = scan_tail(replace(frame, start_us=cut, events=after), snap.taxonomy,
                     stack=timeline.open_at_end, last_advance=last_advance,
                     training_open=tuple(open_phases.items()), training_end_us=training_end,
                     at_us=tail.events[-1].ts_us)
    return snap.evolve(
        cut_us=cut,
        tail=tuple(e for e in tail.events if e.ts_us >= cut),
        scan=scan,
        segments=merged,
        head_segments=snap.prior_segments + merged[:-1],
        terms=_add_terms(snap.terms, attempt_terms(frame, tail.timeline, pieces)),
        first_training_us=snap.first_training_us if snap.first_training_us is not None
        else timeline.first_training_us,
        stack=timeline.open_at_end,
        training_open=tuple(open_phases.items()),
        training_end_us=training_end,
        durable=snap.durable + len(durable),
        max_snapshot_us=max((c.snapshot_us for c in durable), default=snap.max_snapshot_us),
        intervals_us=snap.intervals_us + tuple(b - a for a, b in pairwise(befores) if b > a),
        last_before_us=befores[-1] if befores else None,
        training_us=snap.training_us + training,
        blocking_save_us=snap.blocking_save_us
        + sum(p[1] - p[0] for p in timeline.pieces if p[2] == CHECKPOINT_SAVE),
        lost_us=snap.lost_us + sum(p[1] - p[0] for p in pieces if p[3] == LOST_PROGRESS),
        advances=snap.advances + len(advances),
        last_advance=last_advance,
        first_step=first_step,
        gaps=snap.gaps.add(gaps),
        max_gap_us=max([snap.max_gap_us, *gaps]),
        median_us=stalls.median_interval_us,
        threshold_us=stalls.threshold_us,
        gap_windows=gap_windows,
        windows_before_cut=_clip(stalls.windows, cut),
        components=tuple(components.items()),
        phases=tuple(phases.items()),
        owners=tuple(owners.items()),
        counts=tuple(counts.items()),
        unknown_phase_names=tuple(sorted(set(snap.unknown_phase_names)
                                         | diag.unknown_phase_names)),
    )


def snapshot_job(comp: JobComputation, *, taxonomy: Taxonomy, now_us: int,
                 heartbeat_timeout_us: int) -> JobSnapshot | None:
    """The snapshot of a job `compute_job` computed at `now_us`, or None when the job is
    not one a resumed computation covers (docs/design.md, "Incremental passes")."""
    parts = comp.parts
    res = comp.result
    if parts is None or parts.scheduler or not parts.frames or res.state != "running":
        return None
    frames, diag = parts.frames, parts.diagnostics
    frame = frames[-1]
    if not frame.is_running or frame.failure_us is not None:
        return None
    if diag.unknown_phase_names and frames[:-1]:
        return None  # which attempt named them is not known here
    start, number = frame.start_us, frame.attempt
    for e in parts.events:
        if (e.attempt == number) != (e.ts_us >= start):
            return None  # an event of another attempt after this one began, or before it
    tail = tuple(e for e in parts.events if e.ts_us >= start)
    own = [e for e in tail if e.on_timeline]
    # An allocation's GPUs win (attempts._facts); else the first event's that has them.
    gpus_until: int | None = None
    if not any(e.type == "allocated" and _valid_gpus(e.gpus) is not None for e in own):
        gpus_until = next((e.ts_us for e in own if _valid_gpus(e.gpus) is not None), _ALWAYS)
    first_step = None
    for e in own:
        step = e.attrs.get(STEP_ATTR) if e.attrs is not NO_ATTRS else None
        if type(step) is int and 0 <= step <= MAX_STEP:
            first_step = step
            break
    team_until: int | None = None
    if taxonomy.team_of_model(res.model) is None:
        firsts = [e.ts_us for e in parts.events if isinstance(e.team, str) and e.team]
        team_until = firsts[0] if firsts else _ALWAYS
    prior = comp.segments[: len(comp.segments) - sum(1 for s in comp.segments
                                                      if s.attempt == number)]
    components = dict.fromkeys(COMPONENTS, 0)
    phases: dict[str, int] = {}
    owners: dict[str, int] = {}
    for s in prior:
        d = s.end_us - s.start_us
        components[s.component] += d
        phases[s.phase] = phases.get(s.phase, 0) + d
        owners[s.owner] = owners.get(s.owner, 0) + d
    few = [a for a in diag.few_advances_attempts if a != number]
    snap = JobSnapshot(
        job_id=res.job_id, model=res.model, team=res.team, taxonomy=taxonomy,
        heartbeat_timeout_us=heartbeat_timeout_us, cut_us=start, tail=tail,
        prior_frames=tuple(replace(f, events=()) for f in frames[:-1]),
        prior_terms=parts.terms[:-1], prior_attempts=res.attempts[:-1],
        prior_stalls=comp.stalls[:-1], prior_checkpoints=comp.checkpoints[:-1],
        prior_segments=prior, attempt=number, start_us=start, gpus=frame.gpus,
        allocated=frame.allocated,
        gpus_until_us=gpus_until,
        team_until_us=team_until, segments=(), head_segments=prior, terms=AttemptTerms(),
        first_training_us=None, stack=(), training_open=(), training_end_us=None,
        durable=0, max_snapshot_us=None, intervals_us=(), last_before_us=None,
        training_us=0, blocking_save_us=0, lost_us=0, advances=0, last_advance=None,
        first_step=first_step, gaps=Gaps(), max_gap_us=0, median_us=None, threshold_us=None,
        gap_windows=(), windows_before_cut=(), components=tuple(components.items()),
        phases=tuple(phases.items()), owners=tuple(owners.items()),
        counts=tuple(diag.counts.items()), unknown_phase_names=(),
        gpus_defaulted_attempts=tuple(diag.gpus_defaulted_attempts),
        inferred_end_attempts=tuple(diag.inferred_end_attempts),
        few_advances_attempts=tuple(few),
        snapshot_from_steps=tuple(diag.snapshot_from_steps))
    run = _run_tail(snap, tail, now_us)
    if run is None:
        return None
    # What the attempt's partition counted is counted again by every resumed one.
    counts = Counter(dict(snap.counts))
    counts.subtract(run.diag.counts)
    snap = replace(snap, counts=tuple((k, v) for k, v in counts.items() if v))
    return _advance(snap, run, Counter())


# A bound no event reaches: any new event with a team or GPUs re-frames the job.
_ALWAYS = 2**63


def resume_job(snap: JobSnapshot, events: Iterable[Event], *, taxonomy: Taxonomy,
               now_us: int, heartbeat_timeout_us: int
               ) -> tuple[JobComputation, JobSnapshot] | None:
    """`compute_job` over the snapshot's events and `events` (the job's new ones), and the
    snapshot to resume from next; None when it cannot be resumed (compute the job)."""
    if taxonomy is not snap.taxonomy or heartbeat_timeout_us != snap.heartbeat_timeout_us:
        return None
    diag = DiagnosticsBuilder()
    new = _clean(events, diag)
    for e in new:
        if (e.job_id != snap.job_id or e.attempt != snap.attempt or e.ts_us <= snap.cut_us
                or e.type in _REFRAMING or scheduler.is_scheduler(e)):
            return None
        if e.on_timeline and snap.gpus_until_us is not None and (
                e.ts_us <= snap.gpus_until_us and _valid_gpus(e.gpus) is not None):
            return None
        if snap.team_until_us is not None and e.ts_us <= snap.team_until_us and (
                isinstance(e.team, str) and e.team):
            return None
    scan = snap.scan
    if scan is not None and all(e.ts_us > scan.at_us for e in new):
        # All after the tail's latest event: none repeats one of it, and the scan goes on.
        fresh, dropped = order_events(new)
        count = sum(1 for e in fresh if not e.on_timeline)
        ordered = (*snap.tail, *fresh)
    else:
        known = {(e.event_id, e.ts_us): e for e in snap.tail}
        for e in new:
            kept = known.get((e.event_id, e.ts_us))
            if kept is not None and kept != e:
                return None  # one id and instant, two contents: which wins is a full choice
        ordered, dropped = order_events([*snap.tail, *new])
        added = {(e.event_id, e.ts_us) for e in new} - known.keys()
        count = sum(1 for e in ordered
                    if (e.event_id, e.ts_us) in added and not e.on_timeline)
        fresh = None
    if dropped:
        diag.add("duplicates_dropped", dropped)
    if count:
        diag.add("non_timeline_events", count)
    tail = _run_tail(snap, ordered, now_us, fresh)
    if tail is None:
        return None
    return _computation(snap, tail, diag.counts), _advance(snap, tail, diag.counts)


def computation_of(snap: JobSnapshot, *, now_us: int) -> JobComputation | None:
    """The snapshot's job at `now_us` with no new events (None: compute it)."""
    tail = _run_tail(snap, snap.tail, now_us, ())
    return None if tail is None else _computation(snap, tail, Counter())


__all__ = ["JobParts", "JobSnapshot", "computation_of", "resume_job", "snapshot_job"]
