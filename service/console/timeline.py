"""One job's timeline as SVG geometry: a lane per attempt, a bar per phase coloured by its
component, failures and durable checkpoints marked, lost progress shaded; for an attempt
the scheduler reported, its span above the lane and the trainer's below, and the gaps only
the scheduler sees (hardware_setup, teardown, unreported) dotted.

Drawn on the server (the template writes the shapes): it is a handful of rectangles, and
it then needs no script and prints as it shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ett_core.taxonomy import COMPONENTS

WIDTH = 960
LABEL_W = 110
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


# The derived phases of the scheduler's word (docs/model.md section 24).
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


def _span(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.0f} s"


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
    span_s = max((t1 - t0).total_seconds(), 1.0)
    scale = (WIDTH - LABEL_W - 10) / span_s

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
                settled=seg["settled"], gap=seg["phase"] in GAP_PHASES,
                title=f"{seg['phase']} ({seg['component']}{at_risk}): {_span(secs)} from "
                      f"{seg['start_at']:%Y-%m-%d %H:%M:%S}"))
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
                          label=f"attempt {number} · {cause}", bars=tuple(bars),
                          marks=tuple(lane_marks), scheduler=scheduler, trainer=trainer))
    height = TOP + len(lanes) * (LANE_H + LANE_GAP) + AXIS_H
    ticks = []
    for k in range(6):
        ts = t0 + (t1 - t0) * (k / 5)
        # The end labels lean inwards, so the first and last stay inside the drawing.
        anchor = "start" if k == 0 else "end" if k == 5 else "middle"
        ticks.append({"x": x_of(ts), "label": f"{ts:%m-%d %H:%M}", "anchor": anchor})
    return {"lanes": lanes, "width": WIDTH, "height": height, "ticks": ticks,
            "lane_h": LANE_H, "colours": COLOURS, "axis_y": height - AXIS_H + 4}
