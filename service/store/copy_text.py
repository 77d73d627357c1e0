"""Values as fields of PostgreSQL's COPY text format (the cheapest way in for bulk rows).

Shared by ingest (events) and the aggregator (job results). In that format a tab ends a
field, a newline a row, `\\N` is NULL and backslash escapes; everything else is literal.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from ett_core.instants import HOUR_US

NULL = "\\N"
_SPECIAL = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def opt(value: object) -> str:
    """An int, or a string known to hold no tab, newline or backslash (a validated name)."""
    return NULL if value is None else str(value)


def text(value: str | None) -> str:
    """Any string."""
    if value is None:
        return NULL
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
        return value.translate(_SPECIAL)
    return value


def json_text(dumped: str | None) -> str:
    """JSON text from orjson: it escapes tab, newline and carriage return itself, so only
    backslashes need doubling."""
    return NULL if dumped is None else dumped.replace("\\", "\\\\")


def is_scheduler_line(line: str) -> bool:
    """Whether an events COPY line (`store.events.COLUMNS`) is a scheduler's event: its
    attrs (11th field) say `"source": "scheduler"` at the top level. The substring test
    keeps the common line to one scan; only a candidate is parsed."""
    fields = line.split("\t", 11)
    if len(fields) < 11 or '"scheduler"' not in fields[10]:
        return False
    try:
        attrs = json.loads(fields[10].replace("\\\\", "\\"))
    except ValueError:
        return False
    return isinstance(attrs, dict) and attrs.get("source") == "scheduler"


def boolean(value: bool) -> str:
    return "t" if value else "f"


def float_array(values: Iterable[float]) -> str:
    return "{" + ",".join(repr(float(v)) for v in values) + "}"


def text_array(values: Iterable[str]) -> str:
    """Array literal of strings; each is double-quoted (so "NULL" stays a string)."""
    quoted = ('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values)
    return text("{" + ",".join(quoted) + "}")


# "MM:SS" for each second of an hour.
_MINUTE_SECOND = tuple(f"{s // 60:02d}:{s % 60:02d}" for s in range(3600))


class Timestamps:
    """Microseconds since the epoch as RFC 3339 UTC text, fast: the part up to the hour is
    formatted once per hour (a pass writes tens of thousands of stamps in a few hours), the
    rest from a table, and whole hours (every segment's `hour`) are kept whole."""

    def __init__(self) -> None:
        # hour -> (the text up to the hour, the whole hour's text)
        self._hours: dict[int, tuple[str, str]] = {}

    def __call__(self, us: int | None) -> str:
        if us is None:
            return NULL
        rem = us % HOUR_US
        hour = us - rem
        texts = self._hours.get(hour)
        if texts is None:
            if len(self._hours) > 100_000:
                self._hours.clear()
            d = datetime.fromtimestamp(hour // 1_000_000, UTC)
            prefix = f"{d.year:04d}-{d.month:02d}-{d.day:02d}T{d.hour:02d}:"
            texts = self._hours[hour] = (prefix, f"{prefix}00:00.000000+00:00")
        if not rem:
            return texts[1]
        seconds, micros = divmod(rem, 1_000_000)
        return f"{texts[0]}{_MINUTE_SECOND[seconds]}.{micros:06d}+00:00"


def copy_rows(cursor: object, table: str, columns: Sequence[str], lines: list[str]) -> None:
    """COPY the lines (each ending in a newline) into `table` on a psycopg cursor."""
    if not lines:
        return
    with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:  # type: ignore[attr-defined]
        copy.write("".join(lines).encode())
