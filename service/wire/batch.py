"""Validate an ingest batch into storable rows: the hot part of POST /v1/events.

`wire.validate_event` is the contract: it decides every event and words every error. At
1000-event batches it cost ~4.8 us per event (a datetime and an event object each) and the JSON
for the insert another ~1 us, most of the ingest process's CPU (docs/performance.md). So
each event first tries `_plain_row`, which accepts only what `validate_event` certainly
accepts with the same normal form (a canonical UUID, a UTC timestamp PostgreSQL reads the
same way, names already found valid, no unknown fields) and builds the row at once.
Anything else, valid or not, goes through `validate_event`, so the fast path can never let
through what the contract rejects nor word an error differently.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any, Protocol

from ett_core.events import PHASE_TYPES
from service.store.copy_text import EventRow, EventRows

from .event import (
    CANONICAL_UUID_RE,
    EVENT_TYPES,
    FOLDED,
    KNOWN_FIELDS,
    MAX_ATTEMPT,
    MAX_GPUS,
    MAX_RANK,
    NAME_RE,
    RESERVED_PHASES,
    WireError,
    attrs_json,
    is_scheduler_event,
    validate_event,
)
from .rejections import every_error

# Names found valid (NAME_RE, not a reserved phase) by this process: whether a string is a
# valid name does not depend on the request, and a fleet sends the same few names all day,
# so each is matched against the pattern once rather than in every batch. Bounded: when
# full it starts again (a miss costs one match).
_KNOWN_NAMES: set[str] = set()
_new_row = tuple.__new__
_TEAM = EventRow._fields.index("team")
MAX_KNOWN_NAMES = 100_000
# A principal's remembered verdicts (`WriteScope.verdicts`), cleared when full.
MAX_VERDICTS = 1024
# What `datetime.fromisoformat` and PostgreSQL's timestamptz input read identically, already
# in UTC, to the microsecond: stored as sent. Other offsets take the slow path (normalised).
_UTC_TS_RE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,6})?(?:Z|\+00:00)")


class WriteScope(Protocol):
    """What validation asks of the writer (`service.access.auth.Principal` answers it)."""

    def may_write(self, model: str) -> bool: ...

    def may_write_scheduler(self, model: str) -> bool: ...

    def team_claim_error(self, model: str, team: str | None,
                         configured_owner: str | None) -> str | None: ...

    @property
    def default_team(self) -> str | None: ...

    @property
    def verdicts(self) -> dict[tuple[str, str | None, bool, str | None],
                               tuple[str | None, str | None]]: ...


def default_team_of(principal: WriteScope, team: str | None,
                    configured_owner: str | None) -> str | None:
    """The team a team-less event is stored with: the writer token's own team, unless the
    taxonomy gives the model another owner (then the event stays team-less and the taxonomy
    decides, as it would anyway)."""
    default = principal.default_team
    if team is not None or default is None:
        return team
    return default if configured_owner in (None, default) else None


@dataclass
class ValidatedBatch:
    # The events to store, and their jobs.
    rows: EventRows
    jobs: set[str]
    rejected: list[dict[str, Any]]
    in_batch_duplicates: int
    # Scope errors (model not this token's, team not its to claim): a batch holding only
    # these is answered 403.
    forbidden: list[str]
    # The index in the posted batch of each row (for rejections found while storing).
    indices: list[int]


def _plain_row(obj: Any, lo: datetime, hi: datetime, names: set[str]) -> EventRow | None:
    """The row of an event in the common form, or None: then `validate_event` decides."""
    if type(obj) is not dict or not obj.keys() <= KNOWN_FIELDS:
        return None
    get = obj.get
    event_id, ts, job_id, attempt, model, etype = (
        get("event_id"), get("ts"), get("job_id"), get("attempt"), get("model"), get("type"))
    if (type(event_id) is not str or type(ts) is not str or etype not in EVENT_TYPES
            or type(attempt) is not int or not 0 <= attempt <= MAX_ATTEMPT
            or job_id not in names or model not in names
            or not CANONICAL_UUID_RE.fullmatch(event_id) or not _UTC_TS_RE.fullmatch(ts)):
        return None
    try:
        if not lo < datetime.fromisoformat(ts) < hi:
            return None
    except ValueError:
        return None
    phase, gpus, team, rank = get("phase"), get("gpus"), get("team"), get("rank")
    if phase is None:
        if etype in PHASE_TYPES:
            return None
    elif phase not in names or phase in RESERVED_PHASES:
        return None
    if gpus is None:
        if etype == "allocated":
            return None
    elif type(gpus) is not int or not 1 <= gpus <= MAX_GPUS:
        return None
    if model == FOLDED or team == FOLDED:
        return None
    if (team is not None and team not in names) or (
            rank is not None and (type(rank) is not int or not 0 <= rank <= MAX_RANK)):
        return None
    try:
        attrs = attrs_json(get("attrs"), etype)
    except WireError:
        return None
    # EventRow's fields in order, as one tuple: a quarter of the keyword call's cost.
    return _new_row(EventRow, (event_id, ts, job_id, attempt, model, etype, phase, gpus,
                               team, rank, attrs, None))


def _fast_row(obj: Any, lo: datetime, hi: datetime, names: set[str]) -> EventRow | None:
    try:
        return _plain_row(obj, lo, hi, names)
    except TypeError:  # an unhashable value where a name or type belongs
        return None


def _learn_names(obj: Any, names: set[str]) -> None:
    """Add the event's valid names to the known ones, so later events skip the regex."""
    if type(obj) is dict:
        for key in ("job_id", "model", "phase", "team"):
            value = obj.get(key)
            if (type(value) is str and value not in names and NAME_RE.fullmatch(value)
                    and value not in RESERVED_PHASES):
                if len(names) >= MAX_KNOWN_NAMES:
                    names.clear()
                names.add(value)


@lru_cache(maxsize=64)
def timedelta_of(seconds: float) -> timedelta:
    # A timedelta from a float costs more than the subtraction it is made for.
    return timedelta(seconds=seconds)


def _scope_error(principal: WriteScope, model: str, team: str | None, scheduler: bool,
                 owner: str | None) -> str | None:
    if scheduler:
        # A trainer must not be able to speak for the scheduler (docs/security.md).
        return None if principal.may_write_scheduler(model) else (
            "attrs.source: only an adapter or admin token may send scheduler events")
    if not principal.may_write(model):
        return f"model: this token may not write model {model!r}"
    return principal.team_claim_error(model, team, owner)


def _verdict(principal: WriteScope, key: tuple[str, str | None, bool, str | None]
             ) -> tuple[str | None, str | None]:
    """The team an event of `key` (model, team sent, scheduler or not, the model's
    configured owner) is stored with, and why the principal may not write it (or None)."""
    verdicts = principal.verdicts
    verdict = verdicts.get(key)
    if verdict is None:
        model, sent, scheduler, owner = key
        team = default_team_of(principal, sent, owner)
        verdict = (team, _scope_error(principal, model, team, scheduler, owner))
        if len(verdicts) >= MAX_VERDICTS:
            verdicts.clear()
        verdicts[key] = verdict
    return verdict


def validate_batch(
    raw: list[Any], principal: WriteScope, *, now: datetime, max_future_s: float,
    max_age_s: float, owner_of: Callable[[str], str | None] = lambda _model: None,
    window: bool = False,
) -> ValidatedBatch:
    """Split a batch into rows to store (every event but identical copies) and rejections."""
    rows: list[EventRow] = []
    jobs: set[str] = set()
    rejected: list[dict[str, Any]] = []
    forbidden: list[str] = []
    seen: set[tuple[object, ...]] = set()
    indices: list[int] = []
    names = _KNOWN_NAMES
    duplicates = 0
    lo, hi = now - timedelta_of(max_age_s), now + timedelta_of(max_future_s)
    for index, obj in enumerate(raw):
        row = _fast_row(obj, lo, hi, names)
        if row is None:
            _learn_names(obj, names)
            row = _fast_row(obj, lo, hi, names)
        if row is None:
            try:
                row = validate_event(obj, now=now, max_future_s=max_future_s,
                                     max_age_s=max_age_s, window=window)
            except WireError as exc:
                rejected.append({"index": index, "error": every_error(
                    obj, exc, now=now, max_future_s=max_future_s, max_age_s=max_age_s,
                    window=window)})
                continue
        model = row.model
        team, error = _verdict(principal, (model, row.team, is_scheduler_event(obj),
                                           owner_of(model)))
        if team != row.team:  # the token's own team, for an event that named none
            row = _new_row(EventRow, (*row[:_TEAM], team, *row[_TEAM + 1:]))
        if error is not None:
            rejected.append({"index": index, "error": error})
            forbidden.append(error)
            continue
        # Only an identical re-send is a duplicate: the same id, job and instant with other
        # content is another event, which the store keeps under an id derived from its row.
        # The instant, not its text: the fast path keeps the text as sent, and two
        # spellings of one instant are one key to the store.
        if len(raw) > 1:  # one event cannot repeat itself (the fleet's usual batch)
            identity = (*row._replace(ts=""), datetime.fromisoformat(row.ts))
            if identity in seen:
                duplicates += 1
                continue
            seen.add(identity)
        rows.append(row)
        indices.append(index)
        jobs.add(row.job_id)
    return ValidatedBatch(EventRows.of_rows(rows), jobs, rejected, duplicates, forbidden,
                          indices)
