"""Validated events on their way from `wire/` to table `events`: one typed column per field.

`wire/` builds an `EventRows` (every value already decided, names validated, timestamps as
RFC 3339 text PostgreSQL reads as the instant meant, attrs and unknown fields as orjson's
JSON text); `store/` alone turns it into COPY text or the fallback statement's JSON
(`store.events`). A new column is a field here, filled by `wire/` and read by `store/` by
its name.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from itertools import chain
from operator import attrgetter
from typing import NamedTuple

import orjson


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


@dataclass(frozen=True, slots=True)
class EventRows:
    """A batch of validated events, column by column: row `i` is every column's item `i`."""

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

    def take(self, at: Sequence[int]) -> EventRows:
        """The rows at these positions, in this order."""
        return EventRows(*([column[i] for i in at] for column in self.columns()))

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
        # Rows are EventRow tuples, all of one length: zip needs no strictness here.
        return EventRows(*map(list, zip(*listed)))  # noqa: B905

    @staticmethod
    def concat(parts: Sequence[EventRows]) -> EventRows:
        """The parts' rows one after another."""
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return EMPTY
        return EventRows(*(list(chain.from_iterable(column)) for column in
                           zip(*map(_columns_of, parts))))  # noqa: B905 - equal by type


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(EventRows))
_columns_of = attrgetter(*COLUMNS)
assert EventRow._fields == COLUMNS, "EventRow and EventRows name the same columns"
EMPTY = EventRows(*([] for _ in COLUMNS))
