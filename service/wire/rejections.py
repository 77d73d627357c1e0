"""Every problem of a rejected event, not only the first.

`validate_event` stops at the first broken field, which is right for the hot path. A
rejected event is rare and its sender has to fix all of it, so its message lists every
problem: after each error the offending field is set to a known-valid stand-in (or
dropped) and the event is checked again. The wording stays the contract's own.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from .event import KNOWN_FIELDS, WireError, validate_event

# At most one round per field: the loop always ends, whatever the event holds.
MAX_ROUNDS = len(KNOWN_FIELDS) + 2


def _stand_in(field: str, now: datetime) -> Any:
    return {
        "event_id": str(uuid.UUID(int=0)),
        "ts": now.isoformat(),
        "attempt": 0,
        "rank": 0,
        "gpus": 1,
        "type": "heartbeat",
    }.get(field, "x")


def every_error(obj: Any, first: WireError, *, now: datetime, max_future_s: float,
                max_age_s: float, window: bool = False) -> str:
    """`first` and the errors behind it, joined by "; " in the order they are found."""
    errors = [str(first)]
    if not isinstance(obj, dict):
        return errors[0]
    fixed = dict(obj)
    error: WireError | None = first
    for _ in range(MAX_ROUNDS):
        assert error is not None
        field = str(error).split(":", 1)[0].split(".", 1)[0]
        if field == "attrs":
            fixed.pop("attrs")
        elif field in KNOWN_FIELDS:
            fixed[field] = _stand_in(field, now)
        else:  # an unknown field, or "unknown fields": drop every field the contract lacks
            fixed = {k: v for k, v in fixed.items() if k in KNOWN_FIELDS}
        try:
            validate_event(fixed, now=now, max_future_s=max_future_s, max_age_s=max_age_s,
                           window=window)
            break
        except WireError as exc:
            error = exc
            if str(exc) in errors:
                break
            errors.append(str(exc))
    return "; ".join(errors)
