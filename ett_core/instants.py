"""Instants: RFC 3339 strings at the edges, integer epoch microseconds inside.

Integers keep conservation exact: sums of microsecond durations never drift the way
float seconds would.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from functools import lru_cache

US_PER_SECOND = 1_000_000
HOUR_US = 3600 * US_PER_SECOND

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)
# The instants a datetime can render; an event outside them cannot be placed on a timeline.
MIN_TS_US = (datetime(1, 1, 2, tzinfo=UTC) - _EPOCH) // _ONE_US
MAX_TS_US = (datetime(9999, 12, 30, tzinfo=UTC) - _EPOCH) // _ONE_US


def parse_rfc3339_us(text: str) -> int:
    """Parse an RFC 3339 timestamp with an offset into epoch microseconds.

    Digits beyond microseconds are truncated (the core's resolution). A timestamp
    without an offset is refused: the wire contract requires one and guessing a zone
    would silently shift a job by hours.
    """
    if not isinstance(text, str):
        raise ValueError(f"timestamp must be a string, got {type(text).__name__}")
    # RFC 3339 allows lower-case 't' and 'z'; fromisoformat does not.
    parsed = datetime.fromisoformat(text.strip().upper())
    if parsed.tzinfo is None:
        raise ValueError(f"timestamp {text!r} has no UTC offset")
    return dt_to_us(parsed)


def parse_instant_us(value: object) -> int | None:
    """Read a free-form instant from attrs: an RFC 3339 string or epoch seconds.

    Returns None when the value cannot be read, so callers fall back (and count it)
    instead of failing a whole job on one bad attribute.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value * US_PER_SECOND
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return round(value * US_PER_SECOND)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip().upper())
        except ValueError:
            return None
        if parsed.tzinfo is None:
            # attrs are not validated at ingest; naive instants are taken as UTC.
            parsed = parsed.replace(tzinfo=UTC)
        return dt_to_us(parsed)
    return None


_DAY_US = 24 * HOUR_US


@lru_cache(maxsize=4096)
def _day_text(day: int) -> str:
    return (_EPOCH + timedelta(days=day)).strftime("%Y-%m-%d")


def format_rfc3339_us(ts_us: int) -> str:
    """Format epoch microseconds as RFC 3339 UTC ('Z'), microseconds only when non-zero.

    The date is formatted once per day (every job document carries a few instants and a
    pass writes every running job's); the time of day by arithmetic.
    """
    day, rem = divmod(ts_us, _DAY_US)
    seconds, micros = divmod(rem, US_PER_SECOND)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    base = f"{_day_text(day)}T{hour:02d}:{minute:02d}:{second:02d}"
    if micros:
        return f"{base}.{micros:06d}Z"
    return f"{base}Z"


def us_to_dt(ts_us: int) -> datetime:
    """Epoch microseconds as an aware UTC datetime (what the database driver takes)."""
    return _EPOCH + timedelta(microseconds=ts_us)


def dt_to_us(ts: datetime) -> int:
    """An aware datetime as epoch microseconds."""
    return (ts - _EPOCH) // _ONE_US


def us_to_seconds(duration_us: float) -> float:
    return duration_us / US_PER_SECOND
