"""Rows on their way into PostgreSQL: the typed batch of events and COPY text fields.

`wire/` builds an `EventRows` (every value already decided, names validated, timestamps as
RFC 3339 text PostgreSQL reads as the instant meant, attrs and unknown fields as orjson's
JSON text), one typed column per field of table `events`; only `store/` turns it into
text: the COPY payload here (`copy_payload`), the fallback statement's JSON in
`store/events`. A new column is a field here, filled by `wire/` and read by `store/` by its
name.

The fields below are PostgreSQL's COPY text format (the cheapest way in for bulk rows),
shared by ingest and the aggregator's result rows: a tab ends a field, a newline a row,
`\\N` is NULL and backslash escapes; everything else is literal.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from itertools import chain
from operator import attrgetter
from typing import NamedTuple

import orjson

from ett_core.instants import HOUR_US, US_PER_SECOND

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
            d = datetime.fromtimestamp(hour // US_PER_SECOND, UTC)
            prefix = f"{d.year:04d}-{d.month:02d}-{d.day:02d}T{d.hour:02d}:"
            texts = self._hours[hour] = (prefix, f"{prefix}00:00.000000+00:00")
        if not rem:
            return texts[1]
        seconds, micros = divmod(rem, US_PER_SECOND)
        return f"{texts[0]}{_MINUTE_SECOND[seconds]}.{micros:06d}+00:00"


def copy_rows(cursor: object, table: str, columns: Sequence[str], lines: list[str]) -> None:
    """COPY the lines (each ending in a newline) into `table` on a psycopg cursor."""
    if not lines:
        return
    with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:  # type: ignore[attr-defined]
        copy.write("".join(lines).encode())


def as_text(column: Sequence[object]) -> list[str | None]:
    """A column's values as the text PostgreSQL casts from (None stays None)."""
    if all(type(v) is str or v is None for v in column):
        return list(column)  # type: ignore[arg-type]
    return [None if v is None else str(v) for v in column]


_ESCAPED = ("\\", "\t", "\n", "\r")


def _copy_column(column: Sequence[object]) -> list[str]:
    """A column as COPY text fields: NULL for None, escaped only where a value needs it
    (names and stamps never do; JSON text may hold a backslash)."""
    values = as_text(column)
    present = "".join(v for v in values if v is not None)
    if any(special in present for special in _ESCAPED):
        return [text(v) for v in values]
    return [NULL if v is None else v for v in values]


def copy_payload(rows: EventRows) -> bytes:
    """The rows as one COPY text payload, sorted by event_id (`service.store.events` says
    why).

    Built as if no value needed escaping, then checked once: the payload holds exactly the
    tabs and newlines between fields and rows, a backslash per NULL and no carriage return
    only if no value held one of them. Checking each column for them first cost a small
    group more than the rest of its payload (docs/performance.md, issue 30)."""
    columns = rows.columns()
    fields = [[NULL if v is None else v if type(v) is str else str(v) for v in column]
              for column in columns]
    lines = list(map("\t".join, zip(*fields, strict=True)))
    lines.sort()
    payload = "\n".join(lines) + "\n"
    if (payload.count("\\") != sum(column.count(None) for column in columns)
            or payload.count("\t") != len(lines) * (len(columns) - 1)
            or payload.count("\n") != len(lines) or "\r" in payload):
        return _escaped_payload(rows)
    return payload.encode()


def _escaped_payload(rows: EventRows) -> bytes:
    fields = [_copy_column(column) for column in rows.columns()]
    lines = ["\t".join(row) for row in zip(*fields, strict=True)]
    lines.sort()
    return ("\n".join(lines) + "\n").encode()


class EventRow(NamedTuple):
    """One event as stored, field by field (`EventRows` holds the same fields as columns)."""

    event_id: str
    ts: str
    job_id: str
    attempt: int
    model: str
    type: str
    phase: str | None
    gpus: int | None
    team: str | None
    rank: int | None
    attrs: str | None  # JSON text
    extra: str | None  # JSON text: the fields the contract does not know, kept


@dataclass(slots=True)
class EventRows:
    """A batch of validated events, column by column: row `i` is every column's item `i`.

    Treated as immutable (`take`, `concat` and `dataclasses.replace` make new batches) but
    not frozen: a frozen dataclass sets each of its twelve columns through
    `object.__setattr__`, and building one cost a 1-event request ~5 us (issue 30)."""

    event_id: Sequence[str]
    ts: Sequence[str]
    job_id: Sequence[str]
    attempt: Sequence[int]
    model: Sequence[str]
    type: Sequence[str]
    phase: Sequence[str | None]
    gpus: Sequence[int | None]
    team: Sequence[str | None]
    rank: Sequence[int | None]
    attrs: Sequence[str | None]
    extra: Sequence[str | None]

    def __post_init__(self) -> None:
        lengths = list(map(len, self.columns()))
        if lengths.count(lengths[0]) != len(lengths):
            ragged = [name for name, n in zip(COLUMNS, lengths, strict=True) if n != lengths[0]]
            raise ValueError(f"event rows: columns {ragged} do not hold {lengths[0]} values each")

    def __len__(self) -> int:
        return len(self.event_id)

    def columns(self) -> tuple[Sequence[object], ...]:
        return _columns_of(self)  # type: ignore[no-any-return]

    def row(self, i: int) -> EventRow:
        return EventRow(*(column[i] for column in self.columns()))

    def rows(self) -> Iterable[EventRow]:
        return map(EventRow._make, zip(*self.columns(), strict=True))

    def jobs(self) -> set[str]:
        return set(self.job_id)

    def first_seconds(self) -> dict[str, str]:
        """Each job's earliest instant in the batch, to the second, rounded down, as UTC text
        without its zone. Every stored `ts` is UTC (wire validation normalises it), so its
        first 19 characters are that second and compare as text."""
        out: dict[str, str] = {}
        for job, ts in zip(self.job_id, self.ts, strict=True):
            second = ts[:19]
            if second < out.get(job, "~"):
                out[job] = second
        return out

    def take(self, at: Sequence[int]) -> EventRows:
        """The rows at these positions, in this order."""
        return _trusted([[column[i] for i in at] for column in self.columns()])

    def is_scheduler(self, i: int) -> bool:
        """Whether row `i` is a scheduler's event: its attrs say `"source": "scheduler"`
        at the top level (the substring test keeps the common row to one scan)."""
        attrs = self.attrs[i]
        if attrs is None or '"scheduler"' not in attrs:
            return False
        try:
            parsed = orjson.loads(attrs)
        except orjson.JSONDecodeError:
            return False
        return isinstance(parsed, dict) and parsed.get("source") == "scheduler"

    @staticmethod
    def of_rows(rows: Iterable[EventRow]) -> EventRows:
        listed = list(rows)
        if not listed:
            return EMPTY
        if len(listed) == 1:  # the usual batch of a small writer: no transposing to do
            return _trusted([[value] for value in listed[0]])
        # Rows are EventRow tuples, all of one length: zip needs no strictness here.
        return _trusted(map(list, zip(*listed)))  # noqa: B905

    @staticmethod
    def concat(parts: Sequence[EventRows]) -> EventRows:
        """The parts' rows one after another."""
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return EMPTY
        return _trusted(list(chain.from_iterable(column)) for column in
                        zip(*map(_columns_of, parts)))  # noqa: B905 - equal by type


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(EventRows))
_columns_of = attrgetter(*COLUMNS)
assert EventRow._fields == COLUMNS, "EventRow and EventRows name the same columns"


def _trusted(columns: Iterable[list[object]]) -> EventRows:
    """Columns of one length by construction (rows transposed, columns taken or joined):
    the batch without `__post_init__`'s length check."""
    rows = object.__new__(EventRows)
    # Every column, in COLUMNS' order (a column added to the class and not here fails here).
    (rows.event_id, rows.ts, rows.job_id, rows.attempt, rows.model, rows.type, rows.phase,
     rows.gpus, rows.team, rows.rank, rows.attrs, rows.extra) = columns
    return rows


EMPTY = EventRows(*([] for _ in COLUMNS))
