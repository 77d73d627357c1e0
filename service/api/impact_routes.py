"""Impact endpoints (docs/impact.md): annotations, `GET /v1/impact`, `GET /v1/whatif`.

Thin: selectors are parsed and checked here, every figure comes from
service.results.impact (which the CLI and the console call too).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from service.access.auth import Principal
from service.access.callers import Caller, Reader
from service.errors import Conflict, Forbidden, NotFound, Unprocessable
from service.results import impact as results
from service.results.impact import page_after, page_cursor
from service.results.windows import EARLIEST, LATEST, MAX_WINDOW, parse_window
from service.wire.body import read_body
from service.wire.event import NAME_RE, WireError, parse_rfc3339
from service.wire.labels import LabelError, parse_selector

from .answer_models import AnnotationPage, Created, ImpactReport, WhatIf
from .context import Context

# A cohort with no bound given on either side: the last 30 days (a month of roll-out).
DEFAULT_COHORT = timedelta(days=30)
MAX_TITLE = 200
MAX_TEXT = 4000
MAX_LIST = 32
# GET /v1/annotations pages: (ts, id) order, `next` names where the following page starts.
PAGE_DEFAULT = 100
PAGE_MAX = 500
Labels = Annotated[list[str], Query()]


def _text(name: str, value: str | None) -> None:
    # PostgreSQL text cannot hold U+0000: such a parameter can match nothing.
    if value is not None and "\x00" in value:
        raise Unprocessable(f"{name}: must not contain the character U+0000")


def _labels(name: str, values: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for value in values:
        _text(name, value)
        try:
            key, item = parse_selector(value, name)
        except LabelError as exc:
            raise Unprocessable(str(exc)) from None
        if out.get(key, item) != item:
            raise Unprocessable(f"{name}: {key!r} given twice with different values")
        out[key] = item
    return out


def _instant(name: str, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        instant = parse_rfc3339(value, name)
    except WireError as exc:
        raise Unprocessable(str(exc)) from None
    # Years 1 and 9999 are RFC 3339, but a cohort's default bound (30 days before) or an
    # annotation's week around overflows there: the range of every reading window.
    if not EARLIEST <= instant <= LATEST:
        raise Unprocessable(f"{name}: {instant.isoformat()} is outside the supported range"
                            f" {EARLIEST.isoformat()} to {LATEST.isoformat()}")
    return instant


def _cohort_window(start: datetime | None, end: datetime | None, now: datetime,
                   side: str) -> tuple[datetime, datetime]:
    end = end or now
    start = start or end - DEFAULT_COHORT
    if end <= start:
        raise Unprocessable(f"{side}_end: must be after {side}_start ({start.isoformat()})")
    if end - start > MAX_WINDOW:
        raise Unprocessable(f"{side}: a cohort window is at most {MAX_WINDOW.days} days")
    return start, end


def _annotation_body(body: Any, who: Principal, now: datetime) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise Unprocessable("body: must be a JSON object")
    unknown = set(body) - {"ts", "title", "text", "team", "models", "tags"}
    if unknown:
        raise Unprocessable(f"{sorted(unknown)[0]}: unknown field")
    title = body.get("title")
    if not isinstance(title, str) or not title.strip() or len(title) > MAX_TITLE:
        raise Unprocessable(f"title: required, a string of 1 to {MAX_TITLE} characters")
    text = body.get("text")
    if text is not None and (not isinstance(text, str) or len(text) > MAX_TEXT):
        raise Unprocessable(f"text: a string of at most {MAX_TEXT} characters")
    ts = _instant("ts", body["ts"]) if body.get("ts") is not None else now
    team = body.get("team")
    if team is not None and (not isinstance(team, str) or not NAME_RE.fullmatch(team)):
        raise Unprocessable("team: 1-200 characters [A-Za-z0-9._:/-]")
    if not who.is_admin:
        # A writer annotates for its own team only: its markers land on that team's views.
        if who.role != "writer" or who.team is None:
            raise Forbidden("annotations need an admin token or a writer token with a team")
        if team is not None and team != who.team:
            raise Forbidden(f"team: this token may annotate only for team {who.team!r}")
        team = who.team
    lists = {}
    for name in ("models", "tags"):
        value = body.get(name) or []
        if (not isinstance(value, list) or len(value) > MAX_LIST
                or not all(isinstance(v, str) and NAME_RE.fullmatch(v.replace("*", "x")
                                                                    .replace("?", "x"))
                           for v in value)):
            raise Unprocessable(f"{name}: at most {MAX_LIST} names [A-Za-z0-9._:/-]"
                                " (models may use * and ?)")
        lists[name] = value
    for value in (title, text):
        _text("title/text", value)
    return {"ts": ts, "title": title, "body": text, "team": team, **lists}


def may_annotate(who: Principal) -> None:
    """Checked before a body is read: an admin, or a writer with a team."""
    if not who.is_admin and (who.role != "writer" or who.team is None):
        raise Forbidden("annotations need an admin token or a writer token with a team")


async def annotator(who: Caller) -> Principal:
    """A caller who may annotate, checked before a body is read."""
    may_annotate(who)
    return who


Annotator = Annotated[Principal, Depends(annotator)]
router = APIRouter(prefix="/v1")


@router.post("/annotations", status_code=201, response_model=Created,
             summary="Mark a change (admin, or a writer for its own team)")
async def post_annotation(request: Request, who: Annotator, ctx: Context) -> dict[str, Any]:
    s = ctx.settings
    raw = await read_body(request, limit=s.annotation_max_body_bytes,
                          deadline_s=s.ingest_body_deadline_s)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise Unprocessable("body: must be JSON") from None
    fields = _annotation_body(body, who, ctx.clock())
    max_per_team = s.annotations_max_per_team
    new_id = await run_in_threadpool(results.add_annotation, ctx.engine,
                                     created_by=who.token_id, max_per_team=max_per_team,
                                     **fields)
    if new_id is None:
        whose = f"team {fields['team']!r}" if fields["team"] else "the fleet (no team)"
        raise Conflict(f"{whose} already has {max_per_team} annotations, the limit"
                       " (ETT_ANNOTATIONS_MAX_PER_TEAM); delete old ones first"
                       " (DELETE /v1/annotations/ID)")
    return {"id": new_id}


@router.delete("/annotations/{annotation_id}", status_code=204,
               summary="Delete an annotation (admin, or a writer of its team)")
async def delete_annotation(who: Annotator, ctx: Context, annotation_id: int) -> Response:
    if not 0 < annotation_id < 2**63:
        raise NotFound(f"annotation {annotation_id} is unknown")
    deleted = await run_in_threadpool(results.delete_annotation, ctx.engine, annotation_id,
                                      who.team, who.is_admin)
    if not deleted:
        raise NotFound(f"annotation {annotation_id} is unknown"
                       + ("" if who.is_admin else f" for team {who.team!r}"))
    return Response(status_code=204)


@router.get("/annotations", response_model=AnnotationPage,
            summary="Annotations in [start, end) (default: 30 days), a page at a time")
async def get_annotations(_caller: Reader, ctx: Context, start: str | None = None,
                          end: str | None = None, team: str | None = None,
                          tag: str | None = None, limit: int = PAGE_DEFAULT,
                          cursor: str | None = None) -> dict[str, Any]:
    _text("team", team)
    _text("tag", tag)
    if not 1 <= limit <= PAGE_MAX:
        raise Unprocessable(f"limit: must be 1 to {PAGE_MAX}")
    after = page_after(cursor)
    start_dt, end_dt = parse_window(start, end, ctx.clock(), default=DEFAULT_COHORT)
    page = await run_in_threadpool(results.list_annotations, ctx.engine, start_dt, end_dt,
                                   team, tag, limit, after)
    return {"start": start_dt.isoformat(), "end": end_dt.isoformat(),
            "annotations": page.annotations, "next": page_cursor(page.next_after)}


@router.get("/impact", response_model=ImpactReport, response_model_exclude_unset=True,
            summary="What a change gained: baseline cohort against candidate")
async def get_impact(_caller: Reader, ctx: Context, baseline_start: str | None = None,
                     baseline_end: str | None = None, candidate_start: str | None = None,
                     candidate_end: str | None = None, model: str | None = None,
                     team: str | None = None, baseline_label: Labels = [],  # noqa: B006
                     candidate_label: Labels = [],  # noqa: B006
                     around: int | None = None, days: float = 7.0) -> dict[str, Any]:
    _text("model", model)
    _text("team", team)
    b_labels = _labels("baseline_label", baseline_label)
    c_labels = _labels("candidate_label", candidate_label)
    now = ctx.clock()
    note = None
    if around is not None:
        if any(v is not None for v in (baseline_start, baseline_end, candidate_start,
                                       candidate_end)):
            raise Unprocessable("around: give either around= or cohort bounds, not both")
        if not 0 < around < 2**63:
            raise NotFound(f"annotation {around} is unknown")
        if not 0 < days <= MAX_WINDOW.days:
            raise Unprocessable(f"days: must be in (0, {MAX_WINDOW.days}]")
        note = await run_in_threadpool(results.get_annotation, ctx.engine, around)
        if note is None:
            raise NotFound(f"annotation {around} is unknown")
        ts = datetime.fromisoformat(note["ts"])
        b_win, c_win = results.around(ts, days)
    else:
        bs, be = _instant("baseline_start", baseline_start), _instant("baseline_end",
                                                                      baseline_end)
        cs, ce = _instant("candidate_start", candidate_start), _instant("candidate_end",
                                                                        candidate_end)
        b_win = _cohort_window(bs or cs, be or ce, now, "baseline")
        c_win = _cohort_window(cs or bs, ce or be, now, "candidate")
    baseline = results.Selector(*b_win, model=model, team=team, labels=b_labels)
    candidate = results.Selector(*c_win, model=model, team=team, labels=c_labels)
    out = await run_in_threadpool(results.impact_report, ctx.engine, baseline, candidate)
    if note is not None:
        out["annotation"] = note
    return out


@router.get("/whatif", response_model=WhatIf, response_model_exclude_unset=True,
            summary="Projected ETT if one component's time shrank")
async def get_whatif(_caller: Reader, ctx: Context, component: str, reduction: float,
                     start: str | None = None, end: str | None = None,
                     model: str | None = None, team: str | None = None,
                     label: Labels = []) -> dict[str, Any]:  # noqa: B006
    _text("model", model)
    _text("team", team)
    _text("component", component)
    labels = _labels("label", label)
    window = _cohort_window(_instant("start", start), _instant("end", end), ctx.clock(),
                            "cohort")
    selector = results.Selector(*window, model=model, team=team, labels=labels)
    try:
        return await run_in_threadpool(results.whatif_report, ctx.engine, selector, component,
                                       reduction)
    except ValueError as exc:
        raise Unprocessable(str(exc)) from None
