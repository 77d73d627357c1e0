"""The impact page's figures: two cohorts (two labels over one window, or two periods),
the `GET /v1/impact` document for them, and a what-if on the candidate cohort.

The form's fields are the API's parameters, one label per cohort, so a page's address maps
onto one `/v1/impact` call and one `/v1/whatif` call; every figure is from
service.results.impact unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from sqlalchemy import Engine

from ett_core.impact import OVERHEAD_TERMS, SHRINKABLE
from ett_core.taxonomy import COMPONENTS
from service.errors import Unprocessable
from service.results.impact import (
    Selector,
    around,
    impact_report,
    list_annotations,
    page_after,
    page_cursor,
    whatif_report,
)
from service.results.windows import MAX_WINDOW
from service.wire.event import WireError, parse_rfc3339
from service.wire.labels import LabelError, parse_selector

MODES = ("labels", "periods")
DEFAULTS = {"baseline_label": "variant:baseline", "candidate_label": "variant:optimized",
            "window": "30d", "whatif_component": "initialization", "whatif_reduction": "0.5"}
PERIOD = timedelta(days=7)  # periods mode, nothing given: the week before against this week
ANNOTATIONS = timedelta(days=30)  # the changes listed beneath, each a link to compare around it
NOTES_PAGE = 50  # annotations per page of that list (`notes_after` names the next page)


def _instant(name: str, value: str) -> datetime:
    """A day (its 00:00 UTC) or an RFC 3339 instant, as on the API."""
    value = value.strip()
    try:
        if len(value) == 10:
            return datetime.combine(date.fromisoformat(value), time(), UTC)
        return parse_rfc3339(value, name)
    except (ValueError, WireError):
        raise Unprocessable(f"{name}: expected a day (YYYY-MM-DD) or an RFC 3339 instant,"
                            f" got {value!r}") from None


def _label(query: Mapping[str, str], name: str) -> dict[str, str]:
    text = query.get(name, DEFAULTS[name]).strip()
    if not text:
        return {}
    try:
        key, value = parse_selector(text, name)
    except LabelError as exc:
        raise Unprocessable(str(exc)) from None
    return {key: value}


def _period(query: Mapping[str, str], side: str, start: datetime, end: datetime
            ) -> tuple[datetime, datetime]:
    if query.get(f"{side}_start"):
        start = _instant(f"{side}_start", query[f"{side}_start"])
    if query.get(f"{side}_end"):
        end = _instant(f"{side}_end", query[f"{side}_end"])
    if end <= start:
        raise Unprocessable(f"{side}_end: must be after {side}_start ({start.isoformat()})")
    if end - start > MAX_WINDOW:
        raise Unprocessable(f"{side}: a cohort window is at most {MAX_WINDOW.days} days")
    return start, end


def _selectors(query: Mapping[str, str], now: datetime, windows: Mapping[str, timedelta]
               ) -> tuple[Selector, Selector]:
    mode = query.get("mode", "labels")
    if mode not in MODES:
        raise Unprocessable(f"mode: must be one of {', '.join(MODES)}")
    model = query.get("model") or None
    team = query.get("team") or None
    if mode == "labels":
        window = query.get("window", DEFAULTS["window"])
        if window not in windows:
            raise Unprocessable(f"window: must be one of {', '.join(windows)}")
        start = now - windows[window]
        return (Selector(start, now, model, team, _label(query, "baseline_label")),
                Selector(start, now, model, team, _label(query, "candidate_label")))
    b_start, b_end = _period(query, "baseline", now - 2 * PERIOD, now - PERIOD)
    c_start, c_end = _period(query, "candidate", now - PERIOD, now)
    return (Selector(b_start, b_end, model, team), Selector(c_start, c_end, model, team))


def _reduction(query: Mapping[str, str]) -> float:
    text = query.get("whatif_reduction", DEFAULTS["whatif_reduction"])
    try:
        value = float(text)
    except ValueError:
        raise Unprocessable(f"whatif_reduction: expected a number between 0 and 1, got {text!r}"
                            ) from None
    if not 0 <= value <= 1:
        raise Unprocessable("whatif_reduction: must be between 0 and 1")
    return value


def impact_figures(engine: Engine, now: datetime, query: Mapping[str, str],
                   windows: Mapping[str, timedelta]) -> dict[str, Any]:
    now = now.replace(microsecond=0)  # whole seconds: the bounds are shown in the form
    baseline, candidate = _selectors(query, now, windows)
    component = query.get("whatif_component", DEFAULTS["whatif_component"])
    if component not in SHRINKABLE:
        raise Unprocessable(f"whatif_component: must be one of {', '.join(SHRINKABLE)}")
    reduction = _reduction(query)
    # The period fields show the cohorts compared in periods mode, or in labels mode what
    # they would compare (the week before against this week) unless given.
    periods = {"baseline_start": now - 2 * PERIOD, "baseline_end": now - PERIOD,
               "candidate_start": now - PERIOD, "candidate_end": now}
    if query.get("mode", "labels") == "periods":
        periods = {"baseline_start": baseline.start, "baseline_end": baseline.end,
                   "candidate_start": candidate.start, "candidate_end": candidate.end}
    form = {**DEFAULTS, "mode": "labels", "model": "", "team": "", **query,
            **{k: query.get(k) or v.isoformat() for k, v in periods.items()}}
    page = list_annotations(engine, now - ANNOTATIONS, now, form["team"] or None,
                            limit=NOTES_PAGE,
                            after=page_after(query.get("notes_after") or None, "notes_after"))
    notes = page.annotations
    notes_next = None
    if page.next_after is not None:
        notes_next = {**{k: v for k, v in query.items() if k != "notes_after"},
                      "notes_after": page_cursor(page.next_after)}
    for note in notes:
        # The API's around=ID&days=7: the week before the change against the week after.
        (b_start, b_end), (c_start, c_end) = around(datetime.fromisoformat(note["ts"]), 7)
        note["compare"] = {"mode": "periods", "baseline_start": b_start.isoformat(),
                           "baseline_end": b_end.isoformat(),
                           "candidate_start": c_start.isoformat(),
                           "candidate_end": c_end.isoformat(), "model": form["model"],
                           "team": form["team"]}
    return {"form": form, "annotations": notes, "notes_next": notes_next, "modes": MODES,
            "windows": list(windows), "terms": OVERHEAD_TERMS, "components": COMPONENTS,
            "shrinkable": SHRINKABLE,
            "impact": impact_report(engine, baseline, candidate),
            "whatif": whatif_report(engine, candidate, component, reduction)}
