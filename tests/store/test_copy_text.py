"""COPY text formatting (`service.store.copy_text`): what PostgreSQL reads back is what was
formatted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
from hypothesis import given, settings
from hypothesis import strategies as st

from service.store import copy_text as fmt

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Years 1000-9999: the four-digit years RFC 3339 allows, well past any event's retention.
MICROS = st.integers((datetime(1000, 1, 1, tzinfo=UTC) - EPOCH) // timedelta(microseconds=1),
                     (datetime(9999, 12, 31, tzinfo=UTC) - EPOCH) // timedelta(microseconds=1))


@given(st.lists(MICROS, min_size=1, max_size=50))
def test_timestamps_format_the_instant_they_are_given(values) -> None:
    ts = fmt.Timestamps()  # one formatter for all, as a pass uses it: the hour cache is shared
    for us in values:
        assert datetime.fromisoformat(ts(us)) == EPOCH + timedelta(microseconds=us)
    assert ts(None) == fmt.NULL


_awkward = st.text(alphabet=st.sampled_from(['a', 'é', '🚀', '\t', '\n', '\r', '\\', '"', 'N',
                                             ',', '{', '}', ' ', "'"]), max_size=12)


_names = st.lists(st.one_of(_awkward, st.sampled_from(["NULL", "null", ""])), max_size=4)
_floats = st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=3)


@settings(max_examples=60, deadline=None)
@given(_names, _awkward, _floats)
def test_text_and_arrays_read_back_unchanged(database_url, names, value, floats) -> None:
    line = (f"{fmt.text(value)}\t{fmt.text_array(names)}\t{fmt.float_array(floats)}\t"
            f"{fmt.boolean(bool(names))}\t{fmt.text(None)}\n")
    dsn = database_url.replace("postgresql+psycopg", "postgresql")
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("CREATE TEMP TABLE t (v text, a text[], f float8[], b boolean, n text)")
        fmt.copy_rows(cur, "t", ("v", "a", "f", "b", "n"), [line])
        cur.execute("SELECT v, a, f, b, n FROM t")
        assert cur.fetchone() == (value, names, floats, bool(names), None)
