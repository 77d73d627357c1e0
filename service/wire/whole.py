"""The whole-batch fast path of POST /v1/events: one typed decode of the body, checks over
the batch's columns, and the COPY lines.

msgspec decodes the body straight from bytes into typed structs in C (types, integer bounds,
unknown fields) at ~1 us per event. What it cannot check cheaply per event is checked once
per batch: the ids and timestamps as one joined string against one compiled pattern, the
names as the batch's few distinct values. A batch this path does not certainly decide as
`wire.batch.validate_batch` would (any event that is invalid, unusual or merely in another
normal form, an in-batch duplicate, a scope error) is answered None, and the caller decides
the whole batch the per-event way: every rejection and its wording stay that path's.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date, datetime, timedelta
from typing import Annotated, Any

import msgspec

from service.store.copy_text import NULL as _N

from .batch import ValidatedBatch, WriteScope
from .event import (
    EVENT_TYPES,
    MAX_GPUS,
    MAX_INT32,
    NAME_RE,
    RESERVED_PHASES,
    WireError,
    attrs_json,
)

_Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_INT32)]


class _Event(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    # An unknown field is kept as `extra` by the per-event path: forbidden here, so such an
    # event sends the batch there.
    event_id: str
    ts: str
    job_id: str
    attempt: _Count
    model: str
    type: str
    phase: str | None = None
    gpus: Annotated[int, msgspec.Meta(ge=1, le=MAX_GPUS)] | None = None
    team: str | None = None
    rank: _Count | None = None
    attrs: dict[str, Any] | None = None


class _Batch(msgspec.Struct, gc=False):
    events: list[_Event]


_DECODER = msgspec.json.Decoder(_Batch)
_HEX = b"0123456789abcdef"
# A canonical id, as str(uuid.UUID(...)) writes it, is hex but for a dash at each of these.
_ID_DASHES = (8, 13, 18, 23)
# UTC to the microsecond, the form datetime.fromisoformat and PostgreSQL read alike: stored
# as sent. Days past a month's end are caught by the check of the distinct dates.
_TS = (r"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])"
       r"T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,6})?(?:Z|\+00:00)")
_TS_RE = re.compile(f"(?:{_TS},)*{_TS}")
_SECOND = "%Y-%m-%dT%H:%M:%S"
_PHASE_TYPES = frozenset({"phase_start", "phase_end"})


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


def _dates_exist(stamps: list[str]) -> bool:
    try:
        for day in {ts[:10] for ts in stamps}:
            date.fromisoformat(day)
    except ValueError:
        return False
    return True


def _names_valid(names: set[Any]) -> bool:
    names.discard(None)
    return (all(type(n) is str and NAME_RE.fullmatch(n) for n in names)
            and not names & RESERVED_PHASES)


def _kinds_valid(kinds: set[tuple[str, str | None, bool]]) -> bool:
    """(type, phase, gpus missing) of each event: known types, phases where required,
    gpus on `allocated`."""
    return all(etype in EVENT_TYPES and not (phase is None and etype in _PHASE_TYPES)
               and not (no_gpus and etype == "allocated") for etype, phase, no_gpus in kinds)


def _line(e: _Event) -> str:
    phase, gpus, team, rank, attrs = e.phase, e.gpus, e.team, e.rank, e.attrs
    return (f"{e.event_id}\t{e.ts}\t{e.job_id}\t{e.attempt}\t{e.model}\t{e.type}\t"
            f"{_N if phase is None else phase}\t{_N if gpus is None else gpus}\t"
            f"{_N if team is None else team}\t{_N if rank is None else rank}\t"
            f"{_N if attrs is None else attrs_json(attrs, e.type).replace(_BS, _BS2)}\t\\N\n")


_BS, _BS2 = "\\", "\\\\"


def decide_whole(
    body: bytes | bytearray, max_events: int, principal: WriteScope, *, now: datetime,
    max_future_s: float, max_age_s: float,
    owner_of: Callable[[str], str | None] = lambda _model: None,
) -> ValidatedBatch | None:
    """The batch's rows if every event in `body` is plainly valid and writable, else None."""
    try:
        events = _DECODER.decode(body).events
    except msgspec.DecodeError:  # ValidationError included
        return None
    if not 0 < len(events) <= max_events:
        return None
    ids = [e.event_id for e in events]
    stamps = [e.ts for e in events]
    if not _ids_canonical(ids) or not _TS_RE.fullmatch(",".join(stamps)):
        return None
    lo = (now - timedelta(seconds=max_age_s)).strftime(_SECOND)
    hi = (now + timedelta(seconds=max_future_s)).strftime(_SECOND)
    # Same layout up to the second, so the string order is the time order there; an instant
    # within the bounds' own seconds is left to the per-event path.
    if not (lo < min(stamps)[:19] and max(stamps)[:19] < hi and _dates_exist(stamps)):
        return None
    jobs = {e.job_id for e in events}
    scopes = {(e.model, e.team) for e in events}
    kinds = {(e.type, e.phase, e.gpus is None) for e in events}
    if (len(set(ids)) != len(ids) or not _kinds_valid(kinds)
            or not _names_valid(jobs | {m for m, _ in scopes} | {t for _, t in scopes}
                                | {p for _, p, _ in kinds})):
        return None
    for model, team in scopes:
        if not principal.may_write(model) or principal.team_claim_error(
                model, team, owner_of(model)) is not None:
            return None
    try:
        lines = [_line(e) for e in events]
    except (WireError, TypeError):
        return None
    return ValidatedBatch(lines, jobs, [], 0, [])
