"""How the console writes figures: the same rounding everywhere, and a dash for "none"."""

from __future__ import annotations

from datetime import datetime
from typing import Any

DASH = "\u2013"  # an en dash: "no figure", not a minus sign


def pct(ratio: float | None) -> str:
    return DASH if ratio is None else f"{100 * ratio:.1f} %"


def gpu_hours(gpu_seconds: float | None) -> str:
    return DASH if gpu_seconds is None else f"{gpu_seconds / 3600:,.1f}"


def hours(value: float | None) -> str:
    # `or 0.0`: a figure that rounds to zero from below reads 0.0, not -0.0.
    return DASH if value is None else f"{round(value, 1) or 0.0:,.1f}"


def seconds(value: float | None) -> str:
    """Plain seconds as h/min/s/ms: figures run from milliseconds (a first job's phases)
    to days, and each keeps three significant digits or more."""
    if value is None:
        return DASH
    if value >= 3600:
        return f"{value / 3600:.2f} h"
    if value >= 60:
        return f"{value / 60:.1f} min"
    if value >= 10:
        return f"{value:.1f} s"
    if value >= 1:
        return f"{value:.2f} s"
    if value == 0:
        return "0 s"
    return f"{value * 1000:.3g} ms"


def when(value: datetime | str | None) -> str:
    if value is None:
        return DASH
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return f"{value:%Y-%m-%d %H:%M} UTC"


def ratio(value: float | None) -> str:
    return DASH if value is None else f"{value:.2f}x"


FILTERS: dict[str, Any] = {"pct": pct, "gpu_hours": gpu_hours, "hours": hours,
                           "seconds": seconds, "when": when, "ratio": ratio}
