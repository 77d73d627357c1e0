"""The connections `POST /v1/events` stores through in `ett serve`: asyncio, on the loop.

Storing a batch through SQLAlchemy in a worker thread cost ~280 us of CPU per request at
1000 single-event posts/s: ~130 us the hop to the thread and back (and the GIL handover),
~130 us SQLAlchemy's execution machinery (docs/performance.md). Here the batch is one
COPY in a transaction, or one autocommit statement for small batches
(`store.events.store_rows_async`), answered once PostgreSQL has committed it, on a psycopg
`AsyncConnection`, awaited on the event loop.

The pool is deliberately small: at most `size` connections, opened on demand and kept;
the ingest statement timeout set once per connection; a caller waits at most `timeout_s`
for one. A connection that broke (a database restart, a network cut) is closed, and so is
every idle one, which were probably cut too: the request that found out gets 503 +
Retry-After, exactly as with the SQLAlchemy pool; the retry connects afresh.
"""

from __future__ import annotations

import asyncio
import logging

import psycopg
from sqlalchemy.engine import make_url

from service.errors import Unavailable
from service.settings import Settings

from .event_rows import EventRows
from .events import Admit, store_rows_async

log = logging.getLogger(__name__)


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
                              or settings.db_statement_timeout_ms))


class IngestPool:
    def __init__(self, url: str, *, size: int, timeout_s: float, statement_timeout_ms: int,
                 connect_timeout_s: int = 5) -> None:
        self._conninfo = libpq_conninfo(url)
        self._size = size
        self._timeout_s = timeout_s
        self._statement_timeout_ms = statement_timeout_ms
        self._connect_timeout_s = connect_timeout_s
        self._idle: list[psycopg.AsyncConnection] = []
        # Made on first use by the loop that serves the requests (and again should another
        # loop take over, as each of a test client's portals runs its own): the
        # connections and the semaphore belong to one loop.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slots = asyncio.Semaphore(size)

    async def store(self, rows: EventRows, admit: Admit | None = None,
                    default_team: str | None = None) -> int:
        """Store the batch (first copy of each id) and mark its jobs dirty; return how many
        events were new. Returns only after PostgreSQL committed; Unavailable when the
        database is not there (now)."""
        if not len(rows):
            return 0
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            await self._adopt(loop)
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
            inserted = await store_rows_async(conn, rows, admit, default_team)
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            # Refused or timed-out connects, a server shutting down, a statement timeout, a
            # connection that died mid-statement (committed or not, the client cannot know:
            # a retry is a duplicate, which changes nothing).
            log.warning("ingest: database unavailable: %s", exc)
            raise Unavailable("ingest: database unavailable; retry later") from None
        finally:
            await self._check_in(conn)
            self._slots.release()
        return inserted

    async def _adopt(self, loop: asyncio.AbstractEventLoop) -> None:
        stale, self._idle = self._idle, []
        self._loop, self._slots = loop, asyncio.Semaphore(self._size)
        await _close_all(stale)

    async def _connect(self) -> psycopg.AsyncConnection:
        conn = await psycopg.AsyncConnection.connect(
            self._conninfo, autocommit=True, connect_timeout=self._connect_timeout_s)
        try:
            if self._statement_timeout_ms:
                await conn.execute(f"SET statement_timeout = {int(self._statement_timeout_ms)}")
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


async def _close_all(conns: list[psycopg.AsyncConnection]) -> None:
    for conn in conns:
        try:
            await conn.close()  # never waits on the server: libpq's finish()
        except psycopg.Error as exc:
            log.debug("ingest: closing a dropped connection: %s", exc)
