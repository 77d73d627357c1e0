"""The connections `POST /v1/events` stores through in `ett serve`: asyncio, on the loop.

Storing a batch through SQLAlchemy in a worker thread cost ~280 us of CPU per request at
1000 single-event posts/s: ~130 us the hop to the thread and back (and the GIL handover),
~130 us SQLAlchemy's execution machinery (docs/performance.md). Here the batch is one
COPY in a transaction, or one autocommit statement for small batches
(`store.events.store_rows_async`), answered once PostgreSQL has committed it, on a psycopg
`AsyncConnection`, awaited on the event loop.

Every store has a deadline (`store_deadline_s`) on the client's side too. The statement
timeout is the server's and cannot end a wait on a server that stopped answering without
closing the connection (a stopped process, a host gone from the network, a connection
stuck in a shutdown); past the deadline the request gets 503 + Retry-After and the
connection is dropped, mid-statement, like any cancelled one.

The pool is deliberately small: at most `size` connections, opened on demand and kept;
the ingest statement timeout set once per connection; a caller waits at most `timeout_s`
for one. A connection that broke (a database restart, a network cut) is closed, and so is
every idle one, which were probably cut too: the request that found out gets 503 +
Retry-After, exactly as with the SQLAlchemy pool; the retry connects afresh.

**Group commit**: concurrent small batches stored by one COPY in one transaction.

A thousand trainers flushing a few events every second send a thousand small requests a
second, and stored one by one each pays its own transaction, statement and round trip: about
0.12 ms of PostgreSQL's CPU and 0.1-0.2 ms of the API's per request (docs/performance.md).
Here a batch waits at most `window_s` (or until the group holds `max_rows` rows) for others,
and the group is stored by one COPY script (`store.events.store_group_async`). Each request
is answered only once the COMMIT holding its rows is read, so a 202 still means stored.

COPY is optimistic: a group that meets a stored id (a retry), the same id twice, or any other
error is rolled back whole and its batches are stored one after the other in arrival order,
each exactly as it would have been alone, so partial acceptance, duplicates and their counts
never depend on grouping (`tests/store/test_group_commit.py` holds the two equal).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import psycopg
from sqlalchemy.engine import make_url

from service.errors import Unavailable
from service.settings import Settings
from service.store_lag import StoreLag

from .copy_text import EventRows
from .events import Admit, store_group_async, store_rows_async

log = logging.getLogger(__name__)


# Every statement of the ingest pool finds stored rows by key only (the insert statement's
# `near`, by job and instant; the claims' and the queue's conflict arbiters), so nothing it
# runs wants a sequential scan or a hash or merge join. Ruled out for the session, the
# insert statement's plan is index lookups whatever the statistics said when it was
# planned: its prepared statement's generic plan, made while a month's partition was still
# small, seq-scanned the grown partition for every call (44 ms each, in the small-writers
# benchmark, until an ANALYZE). `tests/store/test_ingest_pool.py` holds the plan.
KEY_LOOKUPS_ONLY = ("SET enable_seqscan = off; SET enable_hashjoin = off;"
                    " SET enable_mergejoin = off")

# Stores the group's batches; answers each batch's count of new events, or its error.
StoreGroup = Callable[[list[EventRows]], Awaitable[list[int | BaseException]]]


@dataclass(eq=False)
class _Group:
    parts: list[EventRows] = field(default_factory=list)
    waiting: list[asyncio.Future[int]] = field(default_factory=list)
    rows: int = 0
    timer: asyncio.TimerHandle | None = None
    opened: float = 0.0  # when its first batch came (the loop's clock)


class GroupCommit:
    """Gathers the batches of one event loop into groups and has `store_group` store each."""

    def __init__(self, store_group: StoreGroup, *, window_s: float, max_rows: int,
                 lag: StoreLag) -> None:
        self._store_group = store_group
        self.window_s = window_s
        self.max_rows = max_rows
        self.lag = lag
        self._open: _Group | None = None
        self._committing: set[asyncio.Task[None]] = set()

    async def store(self, rows: EventRows) -> int:
        """How many of `rows` were new, once the group holding them has committed."""
        loop = asyncio.get_running_loop()
        group = self._open
        if group is None:
            group = self._open = _Group(opened=loop.time())
            group.timer = loop.call_later(self.window_s, self._close, group)
        done: asyncio.Future[int] = loop.create_future()
        group.parts.append(rows)
        group.waiting.append(done)
        group.rows += len(rows)
        if group.rows >= self.max_rows:
            self._close(group)
        return await done

    def _close(self, group: _Group) -> None:
        if self._open is not group:
            return  # closed by its row budget before the timer fired
        self._open = None
        if group.timer is not None:
            group.timer.cancel()
        task = asyncio.get_running_loop().create_task(self._commit(group))
        self._committing.add(task)
        task.add_done_callback(self._committing.discard)

    async def _commit(self, group: _Group) -> None:
        try:
            answers = await self._store_group(group.parts)
        except BaseException as exc:  # every waiter must hear of it
            answers = [exc] * len(group.parts)
        now = asyncio.get_running_loop().time()
        self.lag.observe(now - group.opened, now)
        for done, answer in zip(group.waiting, answers, strict=True):
            if done.done():
                continue  # the request went away (its client hung up)
            if isinstance(answer, BaseException):
                done.set_exception(answer)
            else:
                done.set_result(answer)


def libpq_conninfo(url: str) -> str:
    """A SQLAlchemy URL (postgresql+psycopg://...) as a libpq URL for psycopg.connect."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def pool_for(url: str, settings: Settings) -> IngestPool:
    """The ingest pool of the app on database `url` (`ett serve`'s, and every test's)."""
    return IngestPool(
        # As many connections as the main engine may open (pool plus overflow).
        url, size=2 * settings.db_pool_size, timeout_s=settings.db_pool_timeout_s,
        # 0 means no ingest-specific timeout: the general one, as on the main engine.
        statement_timeout_ms=(settings.ingest_statement_timeout_ms
                              or settings.db_statement_timeout_ms),
        group_window_s=settings.group_commit_ms / 1000,
        group_max_rows=settings.group_commit_max_rows,
        store_deadline_s=settings.ingest_store_deadline_s)


class IngestPool:
    def __init__(self, url: str, *, size: int, timeout_s: float, statement_timeout_ms: int,
                 connect_timeout_s: int = 5, group_window_s: float = 0.0,
                 group_max_rows: int = 0, store_deadline_s: float = 0.0) -> None:
        self._conninfo = libpq_conninfo(url)
        self._size = size
        self._timeout_s = timeout_s
        self._statement_timeout_ms = statement_timeout_ms
        self._connect_timeout_s = connect_timeout_s
        self._group_window_s = group_window_s
        self._group_max_rows = group_max_rows
        self._store_deadline_s = store_deadline_s
        self._idle: list[psycopg.AsyncConnection] = []
        # Kept across loops (`_adopt`): the fair queue reads it (`service.ingest`).
        self.store_lag = StoreLag()
        # Made on first use by the loop that serves the requests (and again should another
        # loop take over, as each of a test client's portals runs its own): the
        # connections, the semaphore and the open group belong to one loop.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slots = asyncio.Semaphore(size)
        self._groups = self._group_commit()

    def _group_commit(self) -> GroupCommit | None:
        if self._group_window_s <= 0 or self._group_max_rows <= 1:
            return None
        return GroupCommit(self._store_group, window_s=self._group_window_s,
                           max_rows=self._group_max_rows, lag=self.store_lag)

    async def store(self, rows: EventRows, admit: Admit | None = None,
                    default_team: str | None = None) -> int:
        """Store the batch (first copy of each id) and mark its jobs dirty; return how many
        events were new. Returns only after PostgreSQL committed; Unavailable when the
        database is not there (now).

        A batch that claims no job (`admit` None: the claims are known) and is smaller than
        a group's row budget joins a group (`GroupCommit`)."""
        if not len(rows):
            return 0
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            await self._adopt(loop)
        if admit is None and self._groups is not None and len(rows) < self._groups.max_rows:
            return await self._groups.store(rows)
        async with self._within_deadline(), self._connection() as conn:
            return await store_rows_async(conn, rows, admit, default_team)

    @asynccontextmanager
    async def _within_deadline(self) -> AsyncIterator[None]:
        """The block's database work, ended by Unavailable past the store deadline."""
        if self._store_deadline_s <= 0:
            yield
            return
        try:
            async with asyncio.timeout(self._store_deadline_s):
                yield
        except TimeoutError:
            log.warning("ingest: the database did not answer a store within %g s; the"
                        " connection is dropped", self._store_deadline_s)
            raise Unavailable("ingest: the database did not answer in time; retry later"
                              ) from None

    async def _store_group(self, parts: list[EventRows]) -> list[int | BaseException]:
        """The group by one COPY; should that fail, each batch alone, in arrival order.

        A group of one batch too (a lone request while traffic is light): the COPY script
        cost PostgreSQL less than the insert statement's one round trip (1.0-1.5 against
        2.3 ms for one row), and its plan cannot go stale."""
        async with self._within_deadline(), self._connection() as conn:
            try:
                await store_group_async(conn, EventRows.concat(parts))
                return [len(part) for part in parts]
            except (psycopg.OperationalError, psycopg.InterfaceError):
                raise
            except psycopg.Error as exc:
                log.debug("ingest: a group of %d batches is stored batch by batch: %s",
                          len(parts), exc)
            answers: list[int | BaseException] = []
            for part in parts:
                try:
                    answers.append(await store_rows_async(conn, part))
                except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                    answers.append(_unavailable(exc))
                except psycopg.Error as exc:
                    answers.append(exc)
            return answers

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection]:
        """A connection of the pool for the block, within the pool's wait; a database that
        is not there (now) is Unavailable."""
        try:
            if self._slots.locked():  # wait_for costs a task: only when there is a wait
                await asyncio.wait_for(self._slots.acquire(), self._timeout_s)
            else:
                await self._slots.acquire()
        except TimeoutError:
            raise Unavailable("ingest: database connection pool exhausted; retry later") from None
        conn: psycopg.AsyncConnection | None = None
        try:
            conn = self._idle.pop() if self._idle else await self._connect()
            yield conn
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            raise _unavailable(exc) from None
        finally:
            await self._check_in(conn)
            self._slots.release()

    async def _adopt(self, loop: asyncio.AbstractEventLoop) -> None:
        stale, self._idle = self._idle, []
        self._loop, self._slots = loop, asyncio.Semaphore(self._size)
        self._groups = self._group_commit()
        await _close_all(stale)

    async def _connect(self) -> psycopg.AsyncConnection:
        conn = await psycopg.AsyncConnection.connect(
            self._conninfo, autocommit=True, connect_timeout=self._connect_timeout_s)
        try:
            session = KEY_LOOKUPS_ONLY
            if self._statement_timeout_ms:
                session += f"; SET statement_timeout = {int(self._statement_timeout_ms)}"
            await conn.execute(session)
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _check_in(self, conn: psycopg.AsyncConnection | None) -> None:
        if conn is None:
            return
        if not conn.broken and not conn.closed and (
                conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE):
            self._idle.append(conn)
            return
        # Broken (or cancelled mid-statement): drop it, and the idle ones with it.
        stale, self._idle = [conn, *self._idle], []
        await _close_all(stale)

    async def close(self) -> None:
        stale, self._idle = self._idle, []
        await _close_all(stale)


def _unavailable(exc: BaseException) -> Unavailable:
    # Refused or timed-out connects, a server shutting down, a statement timeout, a
    # connection that died mid-statement (committed or not, the client cannot know: a
    # retry is a duplicate, which changes nothing).
    log.warning("ingest: database unavailable: %s", exc)
    return Unavailable("ingest: database unavailable; retry later")


async def _close_all(conns: list[psycopg.AsyncConnection]) -> None:
    for conn in conns:
        try:
            await conn.close()  # never waits on the server: libpq's finish()
        except psycopg.Error as exc:
            log.debug("ingest: closing a dropped connection: %s", exc)
