"""The ingest pool's batch store: one query per batch (BEGIN, the queue rows, the COPY,
COMMIT), answered only once committed; a retry falls back to the statement that skips what
is stored; a failed batch stores nothing and leaves the connection usable."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime

import psycopg
import pytest
from sqlalchemy import text

from service.access.auth import Principal
from service.store.copy_text import EventRows, copy_payload
from service.store.events import COPY_MIN_ROWS, INSERT_SQL, copy_script, store_rows_async
from service.store.ingest_pool import IngestPool, libpq_conninfo
from service.wire.batch import validate_batch
from tests.factories import event

NOW = datetime(2026, 11, 2, tzinfo=UTC)
LIMITS = {"max_future_s": 300.0, "max_age_s": 30 * 86400.0}
ADMIN = Principal(role="admin", token_id="t")


def _rows(job: str, n: int) -> EventRows:
    return validate_batch([event("heartbeat", i / 60, job_id=job) for i in range(n)], ADMIN,
                          now=NOW, **LIMITS).rows


def _counts(engine, job: str) -> tuple[int, int]:
    with engine.connect() as conn:
        events = conn.execute(text("SELECT count(*) FROM events WHERE job_id = :j"), {"j": job})
        queued = conn.execute(text("SELECT count(*) FROM dirty_jobs WHERE job_id = :j"),
                              {"j": job})
        return events.scalar_one(), queued.scalar_one()


def _pool(database_url: str) -> IngestPool:
    return IngestPool(database_url, size=1, timeout_s=5, statement_timeout_ms=10_000)


def test_the_script_queues_the_jobs_sorted_in_the_batchs_transaction() -> None:
    script = copy_script({"b", "a:1"}).decode()
    assert script.startswith("BEGIN; INSERT INTO dirty_jobs")
    assert "'{\"a:1\",\"b\"}'::text[]" in script
    assert script.endswith("FROM STDIN; COMMIT")


def test_a_batch_is_committed_and_queued_before_the_answer(db_engine, database_url) -> None:
    rows = _rows("one-query", 3000)
    assert len(copy_payload(rows)) > 2 * 128 * 1024  # the COPY data goes in several pieces

    async def go() -> tuple[int, tuple[int, int], int]:
        pool = _pool(database_url)
        try:
            n = await pool.store(rows)
            # Read from another connection while the pool's is still open: committed.
            seen = _counts(db_engine, "one-query")
            again = await pool.store(_rows("one-query-2", COPY_MIN_ROWS))
            return n, seen, again
        finally:
            await pool.close()

    n, seen, again = asyncio.run(go())
    assert n == len(rows)
    assert seen == (len(rows), 1)
    assert again == COPY_MIN_ROWS  # the connection went back idle and served the next batch


def test_a_retried_batch_stores_only_the_new_events(db_engine, database_url) -> None:
    rows = _rows("retry", COPY_MIN_ROWS + 10)

    async def go() -> list[int]:
        pool = _pool(database_url)
        try:
            return [await pool.store(rows.take(range(5, 9))), await pool.store(rows),
                    await pool.store(rows)]
        finally:
            await pool.close()

    assert asyncio.run(go()) == [4, len(rows) - 4, 0]
    assert _counts(db_engine, "retry") == (len(rows), 2)  # once per transaction that stored


def test_a_failed_batch_stores_nothing_and_the_connection_recovers(db_engine,
                                                                    database_url) -> None:
    rows = _rows("bad", COPY_MIN_ROWS)
    stamps = list(rows.ts)
    stamps[3] = "not a time"  # only a bug above could send this: the COPY must fail whole
    broken = replace(rows, ts=stamps)

    async def go() -> tuple[tuple[int, int], int]:
        async with await psycopg.AsyncConnection.connect(libpq_conninfo(database_url),
                                                         autocommit=True) as conn:
            with pytest.raises(psycopg.errors.InvalidDatetimeFormat):
                await store_rows_async(conn, broken)
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            after_failure = _counts(db_engine, "bad")
            return after_failure, await store_rows_async(conn, rows)

    assert asyncio.run(go()) == ((0, 0), COPY_MIN_ROWS)
    assert _counts(db_engine, "bad") == (COPY_MIN_ROWS, 1)  # the failed batch left no queue row


def test_in_a_callers_transaction_the_batch_commits_with_it(database_url, db_engine) -> None:
    # The job claim holds a transaction open: the batch then goes by a savepoint,
    # and nothing is visible (or acknowledged) before the caller commits.
    async def go() -> None:
        async with await psycopg.AsyncConnection.connect(libpq_conninfo(database_url),
                                                         autocommit=True) as conn:
            async with conn.transaction():
                await conn.execute("SELECT 1")
                assert await store_rows_async(conn, _rows("tx", COPY_MIN_ROWS)
                                              ) == COPY_MIN_ROWS
                assert _counts(db_engine, "tx") == (0, 0)
            assert _counts(db_engine, "tx") == (COPY_MIN_ROWS, 1)

    asyncio.run(go())


@pytest.mark.parametrize("job", ["it's", 'a","b', "back\\slash"])
def test_a_job_name_that_could_end_the_quoted_list_is_refused(job) -> None:
    # The wire contract never lets such a name through; a caller that skipped it is told.
    with pytest.raises(ValueError, match="quote or a backslash"):
        copy_script({"fine", job})


def test_the_insert_statements_plan_is_key_lookups_even_on_empty_partitions(
        db_engine, database_url) -> None:
    """The generic plan a prepared statement falls back to is made from the statistics of
    the moment: on an empty or small partition, a hash join over sequential scans (what
    PostgreSQL chose here without the pool's session settings), kept while the partition
    grew. On the pool's connections only index lookups are left to choose from."""
    with db_engine.begin() as conn:
        conn.execute(text("TRUNCATE events"))
        conn.execute(text("ANALYZE events"))

    async def plan() -> str:
        pool = _pool(database_url)
        try:
            async with pool._connection() as conn:
                cur = await conn.execute("EXPLAIN (GENERIC_PLAN) "
                                         + INSERT_SQL.replace("%(rows)s", "$1"))
                return "\n".join(row[0] for row in await cur.fetchall())
        finally:
            await pool.close()

    text_plan = asyncio.run(plan())
    assert "Index Scan" in text_plan and "Nested Loop" in text_plan, text_plan
    for avoided in ("Seq Scan on events", "Hash Join", "Merge Join"):
        assert avoided not in text_plan, text_plan
