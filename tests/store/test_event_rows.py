"""The typed batch between `wire/` and `store/`: its columns are table `events`' columns,
and every way of storing it reads the same values."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.store.copy_text import (
    COLUMNS,
    EMPTY,
    EventRow,
    EventRows,
    _escaped_payload,
    copy_payload,
)
from service.store.events import rows_json
from service.store.tables import events


def _row(i: int, **changes: object) -> EventRow:
    base = EventRow(event_id=f"00000000-0000-4000-8000-{i:012d}", ts="2026-11-01T10:00:00Z",
                    job_id="j", attempt=1, model="m", type="heartbeat", phase=None, gpus=None,
                    team=None, rank=None, attrs=None, extra=None)
    return base._replace(**changes)


def test_the_columns_are_the_events_tables_columns() -> None:
    # received_at is the server's, set by the table's default.
    assert set(COLUMNS) == {c.name for c in events.columns} - {"received_at"}


def test_ragged_columns_are_refused() -> None:
    with pytest.raises(ValueError, match=r"columns \['ts'\] do not hold 2 values"):
        EventRows(*([_row(0)[k]] if COLUMNS[k] == "ts" else [_row(0)[k], _row(1)[k]]
                    for k in range(len(COLUMNS))))


def test_copy_text_and_json_carry_the_same_fields() -> None:
    rows = EventRows.of_rows([
        _row(2, attrs='{"s":"back\\\\slash \\\\N","source":"scheduler"}', gpus=8, team="ads"),
        _row(1, phase="training", rank=0, extra='{"x":"tab\\t"}'),
    ])
    lines = copy_payload(rows).decode().splitlines()
    assert [line.split("\t")[0] for line in lines] == [rows.event_id[1], rows.event_id[0]]
    assert lines[1].split("\t")[10] == '{"s":"back\\\\\\\\slash \\\\\\\\N","source":"scheduler"}'
    assert lines[0].split("\t")[6:10] == ["training", "\\N", "\\N", "0"]
    decoded = orjson.loads(rows_json(rows))
    assert decoded[0][7] == "8" and decoded[0][10] == rows.attrs[0]
    assert rows.is_scheduler(0) and not rows.is_scheduler(1)


def test_take_and_concat_keep_rows_whole() -> None:
    rows = EventRows.of_rows([_row(i, rank=i) for i in range(4)])
    assert list(rows.take([3, 1]).rank) == [3, 1]
    assert list(EventRows.concat([rows.take([0]), EMPTY, rows.take([2])]).rows()) == [
        rows.row(0), rows.row(2)]


_odd_text = st.text(alphabet=st.sampled_from(["a", "N", "\\", "\t", "\n", "\r", "é"]),
                    max_size=6)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), _odd_text), st.one_of(st.none(), _odd_text),
                          st.one_of(st.none(), st.integers(0, 9))), min_size=1, max_size=4))
def test_the_payload_built_unescaped_is_the_escaped_one_whenever_it_differs(values) -> None:
    """A value holding a tab, newline, carriage return or backslash (a literal "\\N" too)
    sends the payload the escaping way; otherwise the two ways are one payload."""
    rows = EventRows.of_rows([_row(i, attrs=attrs, team=team, rank=rank)
                              for i, (attrs, team, rank) in enumerate(values)])
    assert copy_payload(rows) == _escaped_payload(rows)
