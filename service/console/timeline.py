"""One job's timeline as SVG geometry: a lane per attempt, a bar per phase coloured by its
component, failures and durable checkpoints marked, lost progress shaded, stalls (time a
job held its GPUs while its steps did not advance) dotted; for an attempt the scheduler
reported, its span above the lane and the trainer's below, and the gaps only the scheduler
sees (hardware_setup, teardown, unreported) dotted.

Drawn on the server (the template writes the shapes): it is a handful of rectangles, and
it then needs no script and prints as it shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ett_core.instants import dt_to_us, us_to_dt
from ett_core.taxonomy import COMPONENTS, STALLED

from .formats import seconds as _span

WIDTH = 960
# Lane labels are two lines ("attempt 12" over its end cause), each at most ~17 characters
# of 11 px text, so this column holds them whole.
LABEL_W = 124
RIGHT_PAD = 10
MAX_TICKS = 6
# Candidate tick spacings, in seconds: the axis takes the smallest that gives at most
# MAX_TICKS ticks, so labels are a round step apart and never overprint.
_STEPS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30,
          60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400,
          2 * 86400, 7 * 86400, 14 * 86400, 28 * 86400)
LANE_H = 26
LANE_GAP = 12
TOP = 8
AXIS_H = 24
COLOURS = {
    "effective_training": "#2e7d32",
    "scheduling": "#6d4c41",
    "initialization": "#1565c0",
    "compilation": "#8e24aa",
    "wasted_training": "#c62828",
    "shutdown": "#546e7a",
    "unattributed": "#bdbdbd",
}
assert set(COLOURS) == set(COMPONENTS), "a colour for every component"


# The derived phases of the scheduler's word (docs/model.md section 25).
GAP_PHASES = frozenset({"hardware_setup", "teardown", "unreported"})


@dataclass(frozen=True)
class Bar:
    x: float
    w: float
    colour: str
    component: str
    phase: str
    lost: bool
    settled: bool
    title: str
    stalled: bool = False
    gap: bool = False


@dataclass(frozen=True)
class Span:
    x: float
    w: float
    title: str


@dataclass(frozen=True)
class Mark:
    x: float
    kind: str  # failure or checkpoint
    title: str


@dataclass(frozen=True)
class Lane:
    attempt: int
    y: float
    label: str
    cause: str
    bars: tuple[Bar, ...]
    marks: tuple[Mark, ...]
    scheduler: Span | None = None  # allocation to release, as the scheduler reported them
    trainer: Span | None = None  # the trainer's first to last event in the attempt


def _merge(segments: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Join the hour-clipped pieces of one phase back together."""
    out: list[dict[str, Any]] = []
    for seg in segments:
        last = out[-1] if out else None
        if (last is not None and last["attempt"] == seg["attempt"]
                and last["end_at"] == seg["start_at"]
                and all(last[k] == seg[k] for k in ("phase", "component", "settled"))):
            last["end_at"] = seg["end_at"]
        else:
            out.append(dict(seg))
    return out


def _instant(ts: datetime) -> str:
    return f"{ts:%Y-%m-%d %H:%M:%S}.{ts.microsecond // 1000:03d}"


def _tick_label(ts: datetime, step_s: float, with_day: bool) -> str:
    if step_s >= 86400:
        return f"{ts:%m-%d}"
    if step_s >= 60:
        text = f"{ts:%H:%M}"
    elif step_s >= 1:
        text = f"{ts:%H:%M:%S}"
    else:
        text = f"{ts:%H:%M:%S}.{ts.microsecond // 1000:03d}"
    return f"{ts:%m-%d} {text}" if with_day else text


def axis_ticks(t0: datetime, t1: datetime, x_of: Any) -> list[dict[str, Any]]:
    """Ticks at round instants (multiples of a step from the epoch, UTC) within [t0, t1]:
    each label is distinct; the date is written on the first tick and where it changes,
    or on every tick when the span is a day or more.
    A label near an edge leans inwards, so it stays inside the drawing."""
    span_s = max((t1 - t0).total_seconds(), 0.001)
    step_s = next((s for s in _STEPS if span_s / s <= MAX_TICKS - 1), _STEPS[-1])
    step_us = round(step_s * 1e6)
    t0_us = dt_to_us(t0)
    first_us = -(-t0_us // step_us) * step_us  # the first multiple at or after t0
    ticks, day = [], None
    long_span = span_s >= 86400 and step_s < 86400
    t_us = first_us
    while (ts := us_to_dt(t_us)) <= t1:
        x = x_of(ts)
        # Over a day or more the same time of day recurs: every tick then names its day.
        label = _tick_label(ts, step_s, ts.date() != day or long_span)
        day = ts.date()
        half = 3.2 * len(label)  # half the label's width at 10 px
        anchor = ("start" if x - half < LABEL_W else "end" if x + half > WIDTH - 2
                  else "middle")
        ticks.append({"x": x, "label": label, "anchor": anchor})
        t_us += step_us
    return ticks


def _spans(attempt: dict[str, Any], end: datetime | None,
           x_of: Any) -> tuple[Span | None, Span | None]:
    """The scheduler's and the trainer's spans of an attempt the scheduler reported."""
    if attempt.get("held_by") != "scheduler" or end is None:
        return None, None
    start = datetime.fromisoformat(attempt["allocated_at"])
    released = attempt.get("released_at")
    stop = datetime.fromisoformat(released) if released else end
    scheduler = Span(x=x_of(start), w=max(x_of(stop) - x_of(start), 0.5),
                     title=f"held by the scheduler: {_span((stop - start).total_seconds())}"
                           f" (queued {_span(attempt.get('queue_seconds') or 0)} before)")
    first, last = attempt.get("trainer_first_at"), attempt.get("trainer_last_at")
    if not first or not last:
        return scheduler, None
    t0, t1 = datetime.fromisoformat(first), datetime.fromisoformat(last)
    trainer = Span(x=x_of(t0), w=max(x_of(t1) - x_of(t0), 0.5),
                   title=f"the trainer's events: {_span((t1 - t0).total_seconds())}")
    return scheduler, trainer


def layout(attempts: list[dict[str, Any]], segments: list[dict[str, Any]],
           marks: list[dict[str, Any]]) -> dict[str, Any]:
    """Geometry for the template. `attempts` are the job result's; times are datetimes."""
    merged = _merge(segments)
    instants = [s["start_at"] for s in merged] + [s["end_at"] for s in merged]
    instants += [m["ts"] for m in marks]
    if not instants:
        return {"lanes": [], "width": WIDTH, "height": TOP + AXIS_H, "ticks": [],
                "colours": COLOURS}
    t0, t1 = min(instants), max(instants)
    span_s = max((t1 - t0).total_seconds(), 0.001)
    scale = (WIDTH - LABEL_W - RIGHT_PAD) / span_s

    def x_of(ts: datetime) -> float:
        return round(LABEL_W + (ts - t0).total_seconds() * scale, 2)

    lanes = []
    numbers = sorted({a["attempt"] for a in attempts} | {s["attempt"] for s in merged})
    by_attempt = {a["attempt"]: a for a in attempts}
    for i, number in enumerate(numbers):
        bars = []
        for seg in (s for s in merged if s["attempt"] == number):
            secs = (seg["end_at"] - seg["start_at"]).total_seconds()
            lost = seg["phase"] == "lost_progress"
            at_risk = "" if seg["settled"] else ", unsettled"
            bars.append(Bar(
                x=x_of(seg["start_at"]), w=max(round(secs * scale, 2), 0.5),
                colour=COLOURS.get(seg["component"], COLOURS["unattributed"]),
                component=seg["component"], phase=seg["phase"], lost=lost,
                settled=seg["settled"], stalled=seg["phase"] == STALLED,
                gap=seg["phase"] in GAP_PHASES,
                title=f"{seg['phase']} ({seg['component']}{at_risk}): {_span(secs)} from "
                      f"{_instant(seg['start_at'])}"))
        lane_marks = []
        for m in (m for m in marks if m["attempt"] == number):
            attrs = m["attrs"] or {}
            if m["type"] == "failure":
                title = f"failure ({attrs.get('cause', 'unknown cause')}) at {m['ts']:%H:%M:%S}"
            else:
                title = f"checkpoint durable at {m['ts']:%H:%M:%S}"
            lane_marks.append(Mark(x=x_of(m["ts"]), kind=m["type"], title=title))
        attempt = by_attempt.get(number, {})
        cause = attempt.get("end_cause", "?")
        end = max((s["end_at"] for s in merged if s["attempt"] == number), default=None)
        scheduler, trainer = _spans(attempt, end, x_of)
        lanes.append(Lane(attempt=number, y=TOP + i * (LANE_H + LANE_GAP),
                          label=f"attempt {number}", cause=cause, bars=tuple(bars),
                          marks=tuple(lane_marks), scheduler=scheduler, trainer=trainer))
    height = TOP + len(lanes) * (LANE_H + LANE_GAP) + AXIS_H
    ticks = axis_ticks(t0, t1, x_of)
    return {"lanes": lanes, "width": WIDTH, "height": height, "ticks": ticks,
            "lane_h": LANE_H, "colours": COLOURS, "axis_y": height - AXIS_H + 4}
