"""The fast paths of ingest agree with the slow ones.

`service.wire.batch` accepts common events without `wire.validate_event`, and `service.store.events`
COPYs large batches instead of inserting them: neither may change what is accepted, what an
error says, or what is stored.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import orjson
import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from service.access.auth import Principal
from service.store.copy_text import EventRow, EventRows
from service.store.events import COPY_MIN_ROWS, rows_json, store_rows
from service.wire.batch import validate_batch
from service.wire.event import WireError, validate_event
from service.wire.rejections import every_error
from tests.factories import event

NOW = datetime(2026, 11, 2, tzinfo=UTC)
LIMITS = {"max_future_s": 300.0, "max_age_s": 30 * 86400.0}
ADMIN = Principal(role="admin", token_id="t")

_odd = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.integers(2**31 - 2, 2**31 + 1),
    st.integers(10**6 - 1, 10**6 + 1), st.integers(2**63 - 1, 2**63),  # gpus, attrs.step
    st.floats(allow_nan=False), st.text(max_size=5), st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
_timestamps = st.one_of(
    st.sampled_from([
        "2026-11-01T10:00:00Z", "2026-11-01T10:00:00.5Z", "2026-11-01T10:00:00.123456Z",
        "2026-11-01T10:00:00.1234567Z", "2026-11-01T10:00:00+00:00", "2026-11-01T12:00:00+02:00",
        "2026-11-01 10:00:00Z", "2026-11-01T10:00:00", "2026-02-30T10:00:00Z",
        "2026-11-02T00:04:59Z", "2026-11-02T00:05:01Z", "2026-10-03T00:00:00Z",
        "2026-10-02T23:59:59Z", "2026-11-01t10:00:00z", "0001-01-01T00:00:00Z",
        "2026-W44-7T10:00:00Z", "20261101T100000Z", "2026-11-01T10Z", "2026-11-01T10:00Z",
        "2026-11-01T12:00:00+0200", "2026-11-01T10:00:00,5Z",
    ]),
    _odd,
)
_names = st.one_of(st.sampled_from(["job-1", "model-a", "a b", "", "x" * 201, "null", "ü",
                                    "lost_progress"]),
                   _odd)
_attrs = st.one_of(
    st.none(), _odd,
    st.fixed_dictionaries({}, optional={
        "cause": st.sampled_from(["infra", "user", "gremlins"]),
        "reason": st.sampled_from(["completed", "bored"]),
        "snapshot_ts": st.one_of(st.just("2026-11-01T09:00:00Z"), st.just("soon"), _odd),
        "step": _odd, "background": _odd,
        "note": st.text(max_size=8),
    }),
)
_changes = st.fixed_dictionaries({}, optional={
    "event_id": st.one_of(st.sampled_from([str(uuid.uuid4()), str(uuid.uuid4()).upper(),
                                           uuid.uuid4().hex, "not-a-uuid"]), _odd),
    "ts": _timestamps, "job_id": _names, "model": _names, "phase": _names, "team": _names,
    "attempt": _odd, "gpus": _odd, "rank": _odd, "attrs": _attrs,
    "type": st.one_of(st.sampled_from(["allocated", "released", "phase_start", "phase_end",
                                       "checkpoint", "failure", "heartbeat", "started"]), _odd),
    "future_field": _odd,
})


def _normal(stored: EventRow) -> list:
    """A row's fields (as the fallback INSERT reads them), the timestamp as an instant: the
    fast path keeps the text as sent."""
    (row,) = orjson.loads(rows_json(EventRows.of_rows([stored])))
    return [row[0], datetime.fromisoformat(row[1]), *row[2:]]


def _reference(raw: list) -> tuple[list, list]:
    """The batch decided by validate_event alone (admin token: no scope errors)."""
    rows, rejected, seen = [], [], set()
    for index, obj in enumerate(raw):
        try:
            row = validate_event(obj, now=NOW, **LIMITS)
        except WireError as exc:
            rejected.append({"index": index, "error": every_error(obj, exc, now=NOW, **LIMITS)})
            continue
        # Only an identical copy is a duplicate (the same id, job and instant with other
        # content is another event: the store derives its id).
        normal = _normal(row)
        if tuple(normal) not in seen:
            seen.add(tuple(normal))
            rows.append(normal)
    return rows, rejected


@settings(max_examples=400, deadline=None)
@given(st.lists(_changes, min_size=1, max_size=6), st.data())
def test_a_batch_is_decided_exactly_as_event_by_event_validation_decides_it(changes, data):
    raw = []
    for change in changes:
        obj = event(data.draw(st.sampled_from(["heartbeat", "phase_start", "allocated",
                                               "failure", "checkpoint"])), 1,
                    phase="training", gpus=8)
        obj.update(change)
        raw.append(obj)
    if data.draw(st.booleans()):
        raw.append(dict(raw[0]))  # a copy within the batch
    batch = validate_batch(raw, ADMIN, now=NOW, **LIMITS)
    rows, rejected = _reference(raw)
    assert [_normal(row) for row in batch.rows.rows()] == rows
    assert batch.rejected == rejected
    assert batch.jobs == {row[2] for row in rows}


def test_an_integer_json_cannot_carry_is_a_rejection_on_both_paths() -> None:
    # Found by the property above: a Python int beyond 64 bits in an unknown field raised a
    # TypeError. The wire cannot carry one (orjson reads it as a float); a caller can.
    big = 2**64
    raw = [event("heartbeat", 1, attrs={"n": big}), event("heartbeat", 2, extra_field=[big])]
    batch = validate_batch(raw, ADMIN, now=NOW, **LIMITS)
    assert not len(batch.rows)
    assert [r["error"] for r in batch.rejected] == [
        "attrs: cannot be stored as JSON (Integer exceeds 64-bit range)",
        "unknown fields: cannot be stored as JSON (Integer exceeds 64-bit range)"]


def test_the_fast_path_keeps_the_timestamp_text_postgresql_reads_the_same_way() -> None:
    ev = event("heartbeat", 1)
    ev["ts"] = "2026-11-01T10:00:00.5Z"
    (row,) = validate_batch([ev], ADMIN, now=NOW, **LIMITS).rows.rows()
    assert row.ts == "2026-11-01T10:00:00.5Z"
    other = dict(ev, event_id=str(uuid.uuid4()), ts="2026-11-01T12:00:00.5+02:00")
    (row,) = validate_batch([other], ADMIN, now=NOW, **LIMITS).rows.rows()
    assert row.ts == "2026-11-01T10:00:00.500000+00:00"


def _tricky(i: int, job: str) -> dict:
    attrs = {"text": 'tab\there "quoted" back\\slash\nnew line \\N ü 🚀', "n": i,
             "nested": {"list": [1, 2.5, None, True]}}
    return event("heartbeat", i / 60, job_id=job, attrs=attrs, team="ads", rank=0,
                 **({"future_field": {"a\\b": "c\td"}} if i % 2 else {}))


def _stored(engine, job: str) -> list[tuple]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(
            "SELECT ts, job_id, attempt, model, type, phase, gpus, team, rank, attrs, extra"
            " FROM events WHERE job_id = :job ORDER BY ts"), {"job": job})]


def _pg(database_url: str) -> psycopg.Connection:
    return psycopg.connect(database_url.replace("postgresql+psycopg", "postgresql"),
                           autocommit=True)


def test_copy_and_insert_store_the_same_values(db_engine, database_url) -> None:
    n = COPY_MIN_ROWS + 8
    copied = validate_batch([_tricky(i, "via-copy") for i in range(n)], ADMIN, now=NOW,
                            **LIMITS).rows
    one_by_one = validate_batch([_tricky(i, "via-insert") for i in range(n)], ADMIN, now=NOW,
                                **LIMITS).rows
    with _pg(database_url) as conn:
        assert store_rows(conn, copied) == n
        assert sum(store_rows(conn, one_by_one.take([i])) for i in range(n)) == n
    a, b = _stored(db_engine, "via-copy"), _stored(db_engine, "via-insert")
    assert len(a) == n
    assert [r[:1] + r[2:] for r in a] == [r[:1] + r[2:] for r in b]
    assert a[1][9]["text"] == 'tab\there "quoted" back\\slash\nnew line \\N ü 🚀'
    assert a[1][10] == {"future_field": {"a\\b": "c\td"}}


def test_a_copy_that_meets_stored_ids_falls_back_and_stores_only_the_new(
        db_engine, database_url) -> None:
    rows = validate_batch([_tricky(i, "retry") for i in range(COPY_MIN_ROWS + 10)], ADMIN,
                          now=NOW, **LIMITS).rows
    with _pg(database_url) as conn:
        assert store_rows(conn, rows.take(range(5, 9))) == 4  # stored earlier: a retried batch
        assert store_rows(conn, rows) == len(rows) - 4
        assert store_rows(conn, rows) == 0
    assert len(_stored(db_engine, "retry")) == len(rows)
    with db_engine.connect() as conn:
        queued = conn.execute(text("SELECT count(*) FROM dirty_jobs WHERE job_id = 'retry'"))
        assert queued.scalar_one() == 2  # once per transaction that stored something


def test_in_a_callers_transaction_the_fallback_keeps_the_transaction(database_url) -> None:
    rows = validate_batch([_tricky(i, "outer") for i in range(COPY_MIN_ROWS)], ADMIN, now=NOW,
                          **LIMITS).rows
    with _pg(database_url) as conn:
        store_rows(conn, rows.take([0]))
        conn.autocommit = False
        with conn.transaction():
            conn.execute("SELECT 1")
            assert store_rows(conn, rows) == len(rows) - 1
        assert conn.execute("SELECT count(*) FROM events WHERE job_id = 'outer'"
                            ).fetchone() == (len(rows),)


@pytest.mark.parametrize("job", ["null", "NULL"])
def test_a_job_called_null_is_queued_by_name(db_engine, database_url, job) -> None:
    batch = validate_batch([event("heartbeat", i / 60, job_id=job) for i in range(COPY_MIN_ROWS)],
                           ADMIN, now=NOW, **LIMITS)
    with _pg(database_url) as conn:
        assert store_rows(conn, batch.rows) == COPY_MIN_ROWS
    with db_engine.connect() as conn:
        assert conn.execute(text("SELECT job_id FROM dirty_jobs")).scalars().all() == [job]
