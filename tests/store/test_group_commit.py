"""Group commit (`service.store.ingest_pool`): batches stored together answer and store
exactly what each stored alone, in arrival order, would have; the group is one
transaction."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from service.access.auth import Principal
from service.store.copy_text import EventRows
from service.store.events import store_rows_async
from service.store.ingest_pool import IngestPool, libpq_conninfo
from service.wire.batch import validate_batch
from tests.factories import event

NOW = datetime(2026, 11, 2, tzinfo=UTC)
LIMITS = {"max_future_s": 300.0, "max_age_s": 30 * 86400.0}
ADMIN = Principal(role="admin", token_id="t")
# Few ids, jobs and contents, so batches meet each other's events often: a copy (a retry),
# the same id and instant with other content (another event), the same id in another job.
IDS = [str(uuid.UUID(int=i + 1)) for i in range(4)]
_events = st.builds(
    lambda id_, job, attempt, minute, kind: event(kind, minute, job_id=job, attempt=attempt,
                                                  event_id=id_, phase="training"),
    st.sampled_from(IDS), st.sampled_from(["j1", "j2"]), st.integers(0, 1),
    st.sampled_from([1, 2]), st.sampled_from(["heartbeat", "phase_start"]))
_batches = st.lists(_events, min_size=1, max_size=4)


def _rows(raw: list[dict]) -> EventRows:
    return validate_batch(raw, ADMIN, now=NOW, **LIMITS).rows


def _stored(engine) -> tuple[list[tuple], set[str]]:
    with engine.connect() as conn:
        events = [tuple(r) for r in conn.execute(text(
            "SELECT event_id, ts, job_id, attempt, model, type, phase, attrs FROM events"
            " ORDER BY job_id, event_id, ts"))]
        queued = set(conn.execute(text("SELECT job_id FROM dirty_jobs")).scalars())
    return events, queued


def _reset(engine) -> None:
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE events, dirty_jobs"))


async def _grouped(url: str, batches: list[EventRows]) -> list[int]:
    pool = IngestPool(url, size=2, timeout_s=5, statement_timeout_ms=10_000,
                      group_window_s=0.02, group_max_rows=10_000)
    try:
        # Started in one go, each joins the open group in this order.
        return list(await asyncio.gather(*(pool.store(rows) for rows in batches)))
    finally:
        await pool.close()


async def _one_by_one(url: str, batches: list[EventRows]) -> list[int]:
    async with await psycopg.AsyncConnection.connect(libpq_conninfo(url),
                                                     autocommit=True) as conn:
        return [await store_rows_async(conn, rows) for rows in batches]


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_batches, min_size=1, max_size=5), st.lists(_events, max_size=3))
def test_a_group_stores_and_answers_what_its_batches_alone_would(db_engine, database_url,
                                                                  raws, earlier) -> None:
    batches = [_rows(raw) for raw in raws]
    stored_before = [_rows(earlier)] if earlier else []
    results = []
    for way in (_grouped, _one_by_one):
        _reset(db_engine)
        asyncio.run(_one_by_one(database_url, stored_before))
        answers = asyncio.run(way(database_url, batches))
        results.append((answers, *_stored(db_engine)))
    assert results[0] == results[1]


def test_a_group_without_conflicts_is_one_transaction(db_engine, database_url) -> None:
    batches = [_rows([event("heartbeat", i, job_id="shared")]) for i in range(5)]
    assert asyncio.run(_grouped(database_url, batches)) == [1] * 5
    with db_engine.connect() as conn:
        # The job is queued once per transaction that stored it: once.
        assert conn.execute(text("SELECT count(*) FROM dirty_jobs")).scalar_one() == 1
        assert conn.execute(text("SELECT count(*) FROM events")).scalar_one() == 5


def test_a_group_that_meets_a_stored_event_falls_back_batch_by_batch(db_engine,
                                                                    database_url) -> None:
    first = event("heartbeat", 1, job_id="retried")
    asyncio.run(_one_by_one(database_url, [_rows([first])]))
    batches = [_rows([event("heartbeat", 2, job_id="retried")]), _rows([dict(first)]),
               _rows([event("heartbeat", 3, job_id="retried"), dict(first)])]
    assert asyncio.run(_grouped(database_url, batches)) == [1, 0, 1]
    with db_engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM events")).scalar_one() == 3


def test_a_lone_batch_is_a_group_of_one_stored_by_copy(db_engine, database_url,
                                                      monkeypatch) -> None:
    from service.store import ingest_pool

    copied: list[int] = []
    real = ingest_pool.store_group_async

    async def counted(conn, rows):
        copied.append(len(rows))
        return await real(conn, rows)

    monkeypatch.setattr(ingest_pool, "store_group_async", counted)
    lone = [_rows([event("heartbeat", 1, job_id="lone"), event("heartbeat", 2, job_id="lone")])]
    assert asyncio.run(_grouped(database_url, lone)) == [2]
    assert copied == [2]
    assert _stored(db_engine)[1] == {"lone"}


def test_a_lone_batch_that_meets_a_stored_event_falls_back_as_a_group_does(
        db_engine, database_url) -> None:
    """A retry (the stored copy), then a same-id event with other content beside a new one,
    each batch alone: the COPY fails, and the batch is stored and answered as it was
    without grouping."""
    first = event("heartbeat", 1, job_id="lone-retry")
    later = [[dict(first)], [{**first, "attempt": 1}, event("heartbeat", 2, job_id="lone-retry")]]
    outcomes = []
    for way in (_grouped, _one_by_one):
        _reset(db_engine)
        asyncio.run(_one_by_one(database_url, [_rows([first])]))
        answers = [asyncio.run(way(database_url, [_rows(raw)])) for raw in later]
        outcomes.append((answers, *_stored(db_engine)))
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][0] == [[0], [2]] and len(outcomes[0][1]) == 3


def test_each_committed_group_is_timed_from_its_first_batch_for_the_fair_queue(
        db_engine, database_url) -> None:
    async def scene() -> tuple[float, float]:
        pool = IngestPool(database_url, size=2, timeout_s=5, statement_timeout_ms=10_000,
                          group_window_s=0.05, group_max_rows=10_000)
        try:
            await pool.store(_rows([event("heartbeat", 1, job_id="timed")]))
            return pool.store_lag.lag_s, pool.store_lag.floor_s
        finally:
            await pool.close()

    lag, floor = asyncio.run(scene())
    # The group waited its whole window (50 ms) for others before its COPY and COMMIT.
    assert 0.05 <= lag < 5 and floor == lag
