"""Validation of the v1 wire contract (docs/model.md section 5), one event at a time.

Hand-written rather than a pydantic model per event: ingest validates up to 5000 events
per request, and every error must name the field the way a client author reads it.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from typing import Any

import orjson

from ett_core import events as vocabulary
from ett_core.events import FAILURE_CAUSES, RELEASE_REASONS
from ett_core.taxonomy import RESERVED_PHASES  # re-exported for the fast path
from service.store.copy_text import EventRow
from service.wire.labels import LabelError, check_labels

EVENT_TYPES = frozenset(vocabulary.EVENT_TYPES)
# The model and team name /metrics folds the series beyond its bounds into: no writer may
# send it, so a folded series never mixes with a real one.
FOLDED = "other"
KNOWN_FIELDS = frozenset(
    {
        "event_id",
        "ts",
        "job_id",
        "attempt",
        "model",
        "type",
        "phase",
        "gpus",
        "team",
        "rank",
        "attrs",
    }
)
NAME_RE = re.compile(r"[A-Za-z0-9._:/-]{1,200}")
# A UUID already in the form str(uuid.UUID(...)) gives back: what every SDK sends. Matching
# it costs ~0.2 us against ~1.6 us for the round trip through uuid.UUID.
CANONICAL_UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
MAX_ATTRS_BYTES = 8 * 1024
# Levels of objects and arrays inside `attrs` (or the unknown fields): every reader of them
# (the JSON encoders, PostgreSQL's jsonb, the core) recurses: 1,000 levels in 2 KB would
# end in a RecursionError (a 500).
MAX_ATTRS_DEPTH = 32
MAX_INT32 = 2**31 - 1
# Bounds (docs/model.md, "Bounds"). The tightest sum is one UTC day of the fleet rollup for
# one model in GPU-microseconds (a bigint): a million GPUs all day is 1e6 * 8.64e10 = 8.6e16,
# a hundredth of 2**63 (9.2e18). One attempt may hold at most 2**20 GPUs: at 2**31 - 1
# a single three-hour attempt would make a day row of 2.3e19, past the bigint.
MAX_GPUS = 2**20
MAX_ATTEMPT = 1_000_000
MAX_RANK = 2**20
# JSON numbers beyond 2**53 are not exact in most clients' parsers.
MAX_STEP = 2**53
# RFC 3339 section 5.6 (date-time), either case of T and Z. fromisoformat alone also took
# ISO 8601 forms RFC 3339 excludes (week dates, basic format, hours only).
RFC3339_RE = re.compile(
    r"\d{4}-\d\d-\d\d[Tt]\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:[Zz]|[+-]\d\d:\d\d)")
_LOCAL_RE = re.compile(r"\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d:\d\d(?:\.\d{1,9})?")


class WireError(ValueError):
    """One event broke the contract; the message names the field."""


def parse_rfc3339(value: Any, field: str) -> datetime:
    if not isinstance(value, str):
        raise WireError(f"{field}: must be an RFC 3339 timestamp string")
    if not RFC3339_RE.fullmatch(value) and not (
            # RFC 3339's own note allows a space between date and time.
            value[10:11] == " " and RFC3339_RE.fullmatch(value[:10] + "T" + value[11:])):
        if _LOCAL_RE.fullmatch(value):
            raise WireError(
                f"{field}: timestamp needs a UTC offset (for example 'Z' or '+00:00')")
        if len(value) <= 10 and "T" not in value.upper():
            raise WireError(f"{field}: timestamp needs a time of day, not only a date")
        raise WireError(
            f"{field}: {value[:64]!r} is not an RFC 3339 timestamp"
            " (YYYY-MM-DDTHH:MM:SS[.fraction] with Z or a +HH:MM offset)")
    try:
        parsed = datetime.fromisoformat(value.upper())
    except ValueError:
        raise WireError(f"{field}: {value[:64]!r} is not an RFC 3339 timestamp") from None
    try:
        return parsed.astimezone(UTC)
    except OverflowError:  # year 1 with a positive offset, year 9999 with a negative one
        raise WireError(f"{field}: {value[:64]!r} is out of range in UTC") from None


def _int(value: Any, field: str, minimum: int, maximum: int = MAX_INT32) -> int:
    # bool is an int subclass; `true` is never a valid count.
    if isinstance(value, bool) or not isinstance(value, int):
        raise WireError(f"{field}: must be an integer")
    if value < minimum:
        raise WireError(f"{field}: must be >= {minimum}, got {value}")
    if value > maximum:
        raise WireError(f"{field}: must be <= {maximum}, got {value}")
    return value


def _name(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise WireError(f"{field}: must be a string")
    if not NAME_RE.fullmatch(value):
        raise WireError(
            f"{field}: must be 1-200 characters of letters, digits and . _ : / -,"
            f" got {value[:64]!r}"
        )
    return value


# PostgreSQL's jsonb cannot hold U+0000 (in a key or a string); storing one failed the whole
# batch with a 500. Looked for only when orjson's output holds the escape.
_NUL_ERROR = "must not contain the character U+0000 (not storable)"


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any("\x00" in k or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


def nesting_depth(value: Any, limit: int) -> int:
    """Levels of objects and arrays in `value`, counted without recursion; stops counting
    once past `limit` (then the answer is `limit + 1`)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            return limit + 1
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children
                     if isinstance(child, dict | list))
    return deepest


def _check_depth(value: Any, what: str) -> None:
    if nesting_depth(value, MAX_ATTRS_DEPTH) > MAX_ATTRS_DEPTH:
        raise WireError(f"{what}: nested deeper than {MAX_ATTRS_DEPTH} levels of objects and"
                        " arrays")


def _dumps(value: Any, what: str) -> bytes:
    try:
        dumped = orjson.dumps(value)
    except TypeError as exc:
        _check_depth(value, what)  # orjson refuses beyond 254 levels
        # Not from the wire (its integers always fit 64 bits), but `validate_event` decides
        # every event it is given: a Python caller's out-of-range integer is a rejection.
        raise WireError(f"{what}: cannot be stored as JSON ({exc})") from None
    # Cheap first: each level needs one bracket, so few brackets mean a shallow value.
    if dumped.count(b"{") + dumped.count(b"[") > MAX_ATTRS_DEPTH:
        _check_depth(value, what)
    return dumped


def attrs_json(value: Any, etype: str) -> str | None:
    """Check `attrs` for an event of type `etype`; return it as JSON text (None for none)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise WireError("attrs: must be a JSON object")
    dumped = _dumps(value, "attrs")
    if len(dumped) > MAX_ATTRS_BYTES:
        raise WireError(f"attrs: larger than {MAX_ATTRS_BYTES} bytes")
    if b"\\u0000" in dumped and _has_nul(value):
        raise WireError(f"attrs: {_NUL_ERROR}")
    if etype == "failure" and "cause" in value and value["cause"] not in FAILURE_CAUSES:
        raise WireError(f"attrs.cause: must be one of {', '.join(FAILURE_CAUSES)}")
    if etype == "released" and "reason" in value and value["reason"] not in RELEASE_REASONS:
        raise WireError(f"attrs.reason: must be one of {', '.join(RELEASE_REASONS)}")
    if etype == "checkpoint":
        snap = value.get("snapshot_ts")
        if snap is not None and not (isinstance(snap, int | float) and not isinstance(snap, bool)):
            parse_rfc3339(snap, "attrs.snapshot_ts")
        step = value.get("step")
        if step is not None and (isinstance(step, bool) or not isinstance(step, int)
                                 or not 0 <= step <= MAX_STEP):
            raise WireError(f"attrs.step: must be a non-negative integer at most {MAX_STEP}")
    if (
        etype == "phase_start"
        and "background" in value
        and not isinstance(value["background"], bool)
    ):
        raise WireError("attrs.background: must be true or false")
    if etype == "allocated" and "labels" in value:
        try:
            check_labels(value["labels"])
        except LabelError as exc:
            raise WireError(str(exc)) from None
    if "source" in value:
        _check_scheduler_attrs(value, etype)
    return dumped.decode()


# docs/model.md, "The scheduler's word": what a scheduler adapter may send.
SCHEDULER_TYPES = ("allocated", "released", "failure", "phase_start", "phase_end")


def is_scheduler_event(obj: Any) -> bool:
    """Whether a raw wire event claims to come from a scheduler (its writer must be one)."""
    attrs = obj.get("attrs") if type(obj) is dict else None
    return type(attrs) is dict and attrs.get("source") == "scheduler"


def _check_scheduler_attrs(value: dict[str, Any], etype: str) -> None:
    if value["source"] != "scheduler":
        raise WireError("attrs.source: must be 'scheduler' (leave it out on a trainer's event)")
    if etype not in SCHEDULER_TYPES:
        raise WireError(f"type: a scheduler sends only {', '.join(SCHEDULER_TYPES)}, not {etype}")
    queued = value.get("queued_at")
    if queued is not None:
        if isinstance(queued, int | float) and not isinstance(queued, bool):
            raise WireError("attrs.queued_at: must be an RFC 3339 timestamp")
        parse_rfc3339(queued, "attrs.queued_at")
    if "gpus_assumed" in value and not isinstance(value["gpus_assumed"], bool):
        raise WireError("attrs.gpus_assumed: must be true or false")
    for key in ("state", "exit_code"):
        if key in value and not (isinstance(value[key], str) and len(value[key]) <= 64):
            raise WireError(f"attrs.{key}: must be a string of at most 64 characters")


def age_error(ts: Any, max_age_s: float, window: bool) -> str:
    """The rejection of a `ts` older than the writer may send: the ingest window for a
    writer (with the backfill path), the retention horizon for an admin."""
    if window:
        return (f"ts: {ts} is older than the ingest window of {max_age_s / 86400:g} days"
                " (ETT_INGEST_MAX_AGE); older events are backfilled by an admin: POST them"
                " with an admin token (docs/operations.md, \"Backfill\")")
    return f"ts: {ts} is older than the retention horizon of {max_age_s / 86400:.0f} days"


def validate_event(obj: Any, *, now: datetime, max_future_s: float, max_age_s: float,
                   window: bool = False) -> EventRow:
    """Return the normalised event or raise WireError naming the offending field."""
    if not isinstance(obj, dict):
        raise WireError("event: must be a JSON object")
    for required in ("event_id", "ts", "job_id", "attempt", "model", "type"):
        if required not in obj:
            raise WireError(f"{required}: is required")
    raw_id = obj["event_id"]
    if not isinstance(raw_id, str):
        raise WireError("event_id: must be a UUID string")
    if CANONICAL_UUID_RE.fullmatch(raw_id):
        event_id = raw_id
    else:
        try:
            event_id = str(uuid.UUID(raw_id))
        except ValueError:
            raise WireError(f"event_id: {raw_id[:64]!r} is not a UUID") from None
    ts = parse_rfc3339(obj["ts"], "ts")
    skew = (ts - now).total_seconds()
    if skew > max_future_s:
        raise WireError(
            f"ts: {obj['ts']} is {skew:.0f} s ahead of the server clock"
            f" (limit {max_future_s:.0f} s)"
        )
    if -skew > max_age_s:
        raise WireError(age_error(obj["ts"], max_age_s, window))
    job_id = _name(obj["job_id"], "job_id")
    attempt = _int(obj["attempt"], "attempt", 0, MAX_ATTEMPT)
    model = _name(obj["model"], "model")
    if model == FOLDED:
        raise WireError(f"model: {FOLDED!r} is reserved (/metrics sums the models beyond its"
                        " bound under that name)")
    etype = obj["type"]
    if not isinstance(etype, str) or etype not in EVENT_TYPES:
        raise WireError(
            f"type: must be one of {', '.join(sorted(EVENT_TYPES))}, got {etype!r}"[:300]
        )
    phase = obj.get("phase")
    if etype in ("phase_start", "phase_end"):
        if phase is None:
            raise WireError(f"phase: is required for {etype}")
        phase = _name(phase, "phase")
    elif phase is not None:
        phase = _name(phase, "phase")
    if phase in RESERVED_PHASES:
        raise WireError(f"phase: {phase!r} is reserved for what the engine derives")
    gpus = obj.get("gpus")
    if etype == "allocated" and gpus is None:
        raise WireError("gpus: is required for allocated")
    if gpus is not None:
        gpus = _int(gpus, "gpus", 1, MAX_GPUS)
    team = obj.get("team")
    if team is not None:
        team = _name(team, "team")
        if team == FOLDED:
            raise WireError(f"team: {FOLDED!r} is reserved (/metrics sums the teams beyond its"
                            " bound under that name)")
    rank = obj.get("rank")
    if rank is not None:
        rank = _int(rank, "rank", 0, MAX_RANK)
    attrs_text = attrs_json(obj.get("attrs"), etype)
    extra = (None if KNOWN_FIELDS.issuperset(obj)
             else {k: v for k, v in obj.items() if k not in KNOWN_FIELDS})
    extra_text = None
    if extra is not None:
        dumped = _dumps(extra, "unknown fields")
        if len(dumped) > MAX_ATTRS_BYTES:
            raise WireError(
                f"{next(iter(extra))}: unknown fields larger than {MAX_ATTRS_BYTES} bytes")
        if b"\\u0000" in dumped and _has_nul(extra):
            raise WireError(f"unknown fields: {_NUL_ERROR}")
        extra_text = dumped.decode()
    return EventRow(
        event_id, ts.isoformat(), job_id, attempt, model, etype, phase, gpus, team, rank,
        attrs_text, extra_text,
    )
