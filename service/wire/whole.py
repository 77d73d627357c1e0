"""The whole-batch fast path of POST /v1/events: one typed decode of the body, checks over
the batch's columns, and the rows to store, column by column.

msgspec decodes the body straight from bytes into typed structs in C (types, integer bounds,
unknown fields) at ~1 us per event. What it cannot check cheaply per event is checked once
per batch, in C as far as possible: the ids as one joined string (their dashes and commas by
slicing, the rest by deleting hex digits), the timestamps as one JSON array of RFC 3339
instants that msgspec reads, the names as the batch's few distinct values. A batch this path
does not certainly decide as `wire.batch.validate_batch` would (any event that is invalid,
unusual or merely in another normal form, an in-batch duplicate, a scope error) is answered
None, and the caller decides the whole batch the per-event way: every rejection and its
wording stay that path's.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any

import msgspec
import orjson
from msgspec.structs import astuple

from ett_core.events import PHASE_TYPES
from service.store.copy_text import EventRows

from .batch import ValidatedBatch, WriteScope, timedelta_of
from .event import (
    EVENT_TYPES,
    FOLDED,
    MAX_ATTEMPT,
    MAX_ATTRS_BYTES,
    MAX_ATTRS_DEPTH,
    MAX_GPUS,
    MAX_RANK,
    NAME_RE,
    RESERVED_PHASES,
    WireError,
    attrs_json,
)

_Attempt = Annotated[int, msgspec.Meta(ge=0, le=MAX_ATTEMPT)]
_Rank = Annotated[int, msgspec.Meta(ge=0, le=MAX_RANK)]
_RESERVED = frozenset(RESERVED_PHASES)


class _Event(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    # An unknown field is kept as `extra` by the per-event path: forbidden here, so such an
    # event sends the batch there.
    event_id: str
    ts: str
    job_id: str
    attempt: _Attempt
    model: str
    type: str
    phase: str | None = None
    gpus: Annotated[int, msgspec.Meta(ge=1, le=MAX_GPUS)] | None = None
    team: str | None = None
    rank: _Rank | None = None
    attrs: dict[str, Any] | None = None


class _Batch(msgspec.Struct, gc=False):
    events: list[_Event]


_DECODER = msgspec.json.Decoder(_Batch)
_HEX = b"0123456789abcdef"
# A canonical id, as str(uuid.UUID(...)) writes it, is hex but for a dash at each of these.
_ID_DASHES = (8, 13, 18, 23)
# msgspec reads RFC 3339 timestamps in C (days past a month's end, hour 24 and second 60
# refused); what it reads beyond the plain UTC form stored as sent is counted out below.
_STAMPS = msgspec.json.Decoder(list[datetime])
_LONG_FRACTION = re.compile(r"\.[0-9]{7}")


def _ids_canonical(ids: list[str]) -> bool:
    """Every id in canonical form, checked on their join in C: 36 characters apart a comma,
    the dashes in their places, and nothing else but lowercase hex."""
    n = len(ids)
    try:
        joined = ",".join(ids).encode("ascii")
    except UnicodeEncodeError:
        return False
    if len(joined) != 37 * n - 1 or joined[36::37] != b"," * (n - 1):
        return False
    if any(joined[i::37] != b"-" * n for i in _ID_DASHES):
        return False
    # With the commas and dashes all where they belong, a count of each suffices.
    return len(joined.translate(None, _HEX)) == 5 * n - 1


def _stamps_plain(stamps: list[str], lo: datetime, hi: datetime) -> bool:
    """Every timestamp RFC 3339 in UTC ('T', then 'Z' or '+00:00'), to the microsecond,
    within (lo, hi): the form PostgreSQL reads as datetime.fromisoformat does, so stored as
    sent. A quote in one breaks the array, so it cannot pass for two; a backslash would be
    read as an escape there (and in COPY text), so none may be in any."""
    joined = ",".join(stamps)
    n = len(stamps)
    if ("\\" in joined or "t" in joined or "z" in joined or " " in joined
            or joined.count("-") != 2 * n
            or joined.count("Z") + joined.count("+") != n
            or joined.count("+") != joined.count("+00:00") or _LONG_FRACTION.search(joined)):
        return False
    try:
        instants = _STAMPS.decode(('["' + joined.replace(",", '","') + '"]').encode())
    except (msgspec.DecodeError, UnicodeEncodeError):
        return False
    return len(instants) == n and lo < min(instants) and max(instants) < hi


def _names_valid(names: set[Any]) -> bool:
    names.discard(None)
    return (all(type(n) is str and NAME_RE.fullmatch(n) for n in names)
            and not names & _RESERVED)


def _kinds_valid(kinds: set[tuple[str, str | None, bool]]) -> bool:
    """(type, phase, gpus missing) of each event: known types, phases where required,
    gpus on `allocated`."""
    return all(etype in EVENT_TYPES and not (phase is None and etype in PHASE_TYPES)
               and not (no_gpus and etype == "allocated") for etype, phase, no_gpus in kinds)


# Types whose attrs have rules of their own (`wire.event.attrs_json`); the others' attrs
# need only be storable.
_ATTRS_RULES = frozenset({"failure", "released", "checkpoint", "phase_start"})


def _attrs_text(attrs: dict[str, Any], etype: str) -> str:
    if etype in _ATTRS_RULES:
        text = attrs_json(attrs, etype)
        assert text is not None
    else:
        dumped = orjson.dumps(attrs)  # TypeError: an integer beyond 64 bits
        if _over_limits(dumped):
            raise WireError("attrs")
        text = dumped.decode()
    return text


def _over_limits(dumped: bytes) -> bool:
    """Whether attrs' JSON text is too large, nested too deep or holds a NUL."""
    return (len(dumped) > MAX_ATTRS_BYTES or b"\\u0000" in dumped
            or dumped.count(b"{") + dumped.count(b"[") > MAX_ATTRS_DEPTH)


def _attrs_texts(raw_attrs: list[dict[str, Any] | None], types: list[str]
                 ) -> list[str | None]:
    """Each event's attrs as `_attrs_text` gives them. When no event's type has attrs
    rules, the limits are checked on all of them at once, and one by one only if the
    total passes one: the totals bound each event's figures (a 10-event batch's attrs cost
    14 us one by one on the benchmark machine, 5 us this way)."""
    if not _ATTRS_RULES.isdisjoint(types):
        return [None if a is None else _attrs_text(a, etype)
                for a, etype in zip(raw_attrs, types, strict=True)]
    dumped = [None if a is None else orjson.dumps(a) for a in raw_attrs]  # TypeError: big int
    present = [d for d in dumped if d is not None]
    # Each is an object's text, so no escape spans two of them, and a total within the
    # limits bounds every part.
    if _over_limits(b"".join(present)) and any(map(_over_limits, present)):
        raise WireError("attrs")
    return [None if d is None else d.decode() for d in dumped]


def decide_whole(
    body: bytes | bytearray, max_events: int, principal: WriteScope, *, now: datetime,
    max_future_s: float, max_age_s: float,
    owner_of: Callable[[str], str | None] = lambda _model: None,
) -> ValidatedBatch | None:
    """The batch's rows if every event in `body` is plainly valid and writable, else None."""
    try:
        events = _DECODER.decode(body).events
    except (msgspec.DecodeError, RecursionError):  # ValidationError included
        # A deeply nested value: the per-event path rejects its event by name.
        return None
    if not 0 < len(events) <= max_events:
        return None
    # The events as columns, transposed in C (a list comprehension per field cost more
    # than the decoding): _Event's fields are the table's, in its order, but `extra`.
    (ids, stamps, job_ids, attempts, models, types, phases, gpus, teams, ranks,
     raw_attrs) = map(list, zip(*map(astuple, events), strict=True))
    if not _ids_canonical(ids) or not _stamps_plain(
            stamps, now - timedelta_of(max_age_s), now + timedelta_of(max_future_s)):
        return None
    if principal.default_team is not None and None in teams:
        return None  # the per-event path gives team-less events the token's team
    jobs = set(job_ids)
    scopes = set(zip(models, teams, strict=True))
    kinds = {(etype, phase, n is None) for etype, phase, n in zip(types, phases, gpus,
                                                                  strict=True)}
    if (len(set(ids)) != len(events) or not _kinds_valid(kinds)
            or not _names_valid(jobs | {m for m, _ in scopes} | {t for _, t in scopes}
                                | {p for _, p, _ in kinds})):
        return None
    if FOLDED in {m for m, _ in scopes} | {t for _, t in scopes}:
        return None  # reserved: the per-event path words the rejection
    if any(a is not None and "source" in a for a in raw_attrs):
        return None  # a scheduler's events are the adapter's scope: the per-event path
    for model, team in scopes:
        if not principal.may_write(model) or principal.team_claim_error(
                model, team, owner_of(model)) is not None:
            return None
    try:
        attrs = _attrs_texts(raw_attrs, types)
    except (WireError, TypeError):
        return None
    rows = EventRows(event_id=ids, ts=stamps, job_id=job_ids, attempt=attempts, model=models,
                     type=types, phase=phases, gpus=gpus, team=teams, rank=ranks, attrs=attrs,
                     extra=[None] * len(events))
    # Nothing rejected or deduplicated here: row i is event i.
    return ValidatedBatch(rows, jobs, [], 0, [], list(range(len(events))))
