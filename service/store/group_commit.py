"""Group commit: concurrent small batches stored by one COPY in one transaction.

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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from .event_rows import EventRows

# Stores the group's batches; answers each batch's count of new events, or its error.
StoreGroup = Callable[[list[EventRows]], Awaitable[list[int | BaseException]]]


@dataclass(eq=False)
class _Group:
    parts: list[EventRows] = field(default_factory=list)
    waiting: list[asyncio.Future[int]] = field(default_factory=list)
    rows: int = 0
    timer: asyncio.TimerHandle | None = None


class GroupCommit:
    """Gathers the batches of one event loop into groups and has `store_group` store each."""

    def __init__(self, store_group: StoreGroup, *, window_s: float, max_rows: int) -> None:
        self._store_group = store_group
        self.window_s = window_s
        self.max_rows = max_rows
        self._open: _Group | None = None
        self._committing: set[asyncio.Task[None]] = set()

    async def store(self, rows: EventRows) -> int:
        """How many of `rows` were new, once the group holding them has committed."""
        loop = asyncio.get_running_loop()
        group = self._open
        if group is None:
            group = self._open = _Group()
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
        for done, answer in zip(group.waiting, answers, strict=True):
            if done.done():
                continue  # the request went away (its client hung up)
            if isinstance(answer, BaseException):
                done.set_exception(answer)
            else:
                done.set_result(answer)
