"""Impact answers (docs/impact.md): cohorts compared, what-ifs, annotations by page.

The sums come from `store/impact.py` (`job_impact` rows, written with each job's results);
the arithmetic is the core's (ett_core.impact). The public functions return plain dicts
(the API, the CLI and the console share them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine

from ett_core.impact import Cohort, impact, whatif
from service.errors import Unprocessable
from service.store import impact as impact_rows

from .windows import EARLIEST

# GET /v1/annotations pages: (ts, id) order, `next` names where the following page starts.
CURSOR_RE = re.compile(r"([0-9]{1,18})_([0-9]{1,18})")


@dataclass(frozen=True)
class Selector:
    """Which jobs a cohort holds: first allocation in [start, end), model glob, team, labels."""

    start: datetime
    end: datetime
    model: str | None = None  # a glob: * and ? as in token model patterns
    team: str | None = None
    labels: Mapping[str, str] | None = None


def load_cohort(conn: Connection, selector: Selector) -> Cohort:
    return impact_rows.load_cohort(conn, selector.start, selector.end, selector.model,
                                   selector.team, selector.labels)


def _selector_wire(s: Selector) -> dict[str, Any]:
    return {"start": s.start.isoformat(), "end": s.end.isoformat(), "model": s.model,
            "team": s.team, "labels": dict(s.labels or {})}


def impact_report(engine: Engine, baseline: Selector, candidate: Selector) -> dict[str, Any]:
    """The `GET /v1/impact` document (each cohort also says how it was selected)."""
    with engine.connect() as conn:
        b, c = load_cohort(conn, baseline), load_cohort(conn, candidate)
    out = impact(b, c)
    out["baseline"]["selector"] = _selector_wire(baseline)
    out["candidate"]["selector"] = _selector_wire(candidate)
    return out


def whatif_report(engine: Engine, selector: Selector, component: str,
                  reduction: float) -> dict[str, Any]:
    """The `GET /v1/whatif` document; ValueError names a bad component or reduction."""
    with engine.connect() as conn:
        cohort = load_cohort(conn, selector)
    out = whatif(cohort, component, reduction)
    out["cohort"]["selector"] = _selector_wire(selector)
    return out


# --- annotations ------------------------------------------------------------------------

def _annotation_wire(row: Any) -> dict[str, Any]:
    return {"id": row[0], "ts": row[1].isoformat(), "title": row[2], "text": row[3],
            "team": row[4], "models": list(row[5]), "tags": list(row[6]),
            "created_by": row[7]}


def add_annotation(engine: Engine, ts: datetime, title: str, body: str | None,
                   team: str | None, models: Sequence[str], tags: Sequence[str],
                   created_by: str | None, max_per_team: int | None = None) -> int | None:
    """The new annotation's id, or None if its team (None: the fleet) already holds
    `max_per_team`."""
    with engine.begin() as conn:
        if max_per_team is not None:
            # One writer at a time per team, so two posts cannot both take the last place.
            impact_rows.lock_team_annotations(conn, team)
            if impact_rows.count_annotations(conn, team) >= max_per_team:
                return None
        return impact_rows.insert_annotation(conn, ts, title, body, team, models, tags, created_by)


def delete_annotation(engine: Engine, annotation_id: int, team: str | None = None,
                      any_team: bool = False) -> bool:
    """Delete one annotation (of `team` unless `any_team`); whether one was deleted."""
    with engine.begin() as conn:
        return impact_rows.delete_annotation(conn, annotation_id, team, any_team)


@dataclass(frozen=True)
class Page:
    """One page of annotations in (ts, id) order, and where the next one starts."""

    annotations: list[dict[str, Any]]
    next_after: tuple[datetime, int] | None


def list_annotations(engine: Engine, start: datetime, end: datetime, team: str | None = None,
                     tag: str | None = None, limit: int = 100,
                     after: tuple[datetime, int] | None = None) -> Page:
    """Annotations in [start, end) in (ts, id) order: at most `limit`, those after `after`
    (the last of the previous page), so a page never skips or repeats one."""
    with engine.connect() as conn:
        found = impact_rows.annotation_rows(conn, start, end, team, tag, limit + 1, after)
    more = len(found) > limit
    found = found[:limit]
    return Page([_annotation_wire(r) for r in found],
                (found[-1][1], found[-1][0]) if more else None)


def get_annotation(engine: Engine, annotation_id: int) -> dict[str, Any] | None:
    with engine.connect() as conn:
        row = impact_rows.annotation_row(conn, annotation_id)
    return None if row is None else _annotation_wire(row)


def around(ts: datetime, days: float) -> tuple[tuple[datetime, datetime],
                                               tuple[datetime, datetime]]:
    """N days before an instant against N days after it."""
    span = timedelta(days=days)
    # Clamped at the calendar's ends: an annotation stored before its `ts` was bounded
    # may lie in year 1 or 9999.
    lo = ts - span if ts - datetime.min.replace(tzinfo=ts.tzinfo) > span else datetime.min
    hi = ts + span if datetime.max.replace(tzinfo=ts.tzinfo) - ts > span else datetime.max
    return (lo.replace(tzinfo=ts.tzinfo), ts), (ts, hi.replace(tzinfo=ts.tzinfo))


def page_cursor(after: tuple[datetime, int] | None) -> str | None:
    """Where the next page of annotations starts, as the `next` a caller gives back."""
    if after is None:
        return None
    return f"{(after[0] - EARLIEST) // timedelta(microseconds=1)}_{after[1]}"


def page_after(cursor: str | None, name: str = "cursor") -> tuple[datetime, int] | None:
    """The (ts, id) a `page_cursor` names; Unprocessable names `name` when it is not one."""
    if cursor is None:
        return None
    match = CURSOR_RE.fullmatch(cursor)
    if match is None:
        raise Unprocessable(f"{name}: give back the `next` of the previous page as is")
    us, ident = int(match[1]), int(match[2])
    try:
        return EARLIEST + timedelta(microseconds=us), ident
    except OverflowError:
        raise Unprocessable(f"{name}: give back the `next` of the previous page as is"
                            ) from None
