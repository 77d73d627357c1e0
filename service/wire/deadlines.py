"""Deadlines for reading request bodies, cheap enough for every small request.

`asyncio.timeout` arms and disarms a timer per use: ~20 us of CPU per request here
(docs/performance.md, issue 30), a tenth of what a whole 1-event `POST /v1/events` is
allowed, for a deadline that almost never fires (the body of a small request is in the
first read). Every read here lasts the same `seconds`, so starting reads in order also
orders their deadlines: a read is one entry of an insertion-ordered dict, and one timer per
loop, armed while any read is open, looks only at the oldest entries every `SWEEP_S` and
cancels the tasks whose deadline has passed. A deadline is kept to within `SWEEP_S`.

Only the event loop's thread touches this (as the in-flight limit), so plain containers
need no lock; should another loop take over (a test client's portal), it is followed.
"""

from __future__ import annotations

import asyncio
import time

SWEEP_S = 0.05


class BodyDeadlines:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        # Each open read's task -> (its deadline, the task's cancel requests at its start).
        self._open: dict[asyncio.Task[object], tuple[float, int]] = {}
        # The tasks cancelled by their deadline -> their cancel requests at their start.
        self._expired: dict[asyncio.Task[object], int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> asyncio.Task[object]:
        """Open a read in the current task; end it with `end` (in a `finally`)."""
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a body deadline needs a task")
        loop = task.get_loop()
        if loop is not self._loop:  # another loop took over: the old one's reads are gone
            self._open, self._expired, self._loop, self._timer = {}, {}, loop, None
        self._open[task] = (time.monotonic() + self.seconds, task.cancelling())
        if self._timer is None:
            self._timer = loop.call_later(SWEEP_S, self._sweep)
        return task

    def end(self, task: asyncio.Task[object]) -> None:
        self._open.pop(task, None)
        if self._expired:
            self._expired.pop(task, None)

    def expired(self, task: asyncio.Task[object]) -> bool:
        """Whether the `CancelledError` that ended `task`'s read was its deadline's (then the
        cancellation is taken back, as `asyncio.timeout` does); else it is someone else's,
        to be raised on."""
        began = self._expired.pop(task, None)
        return began is not None and task.uncancel() <= began

    def _sweep(self) -> None:
        self._timer = None
        now = time.monotonic()
        while self._open:
            task = next(iter(self._open))
            due, began = self._open[task]
            if due > now:
                break
            del self._open[task]
            if not task.done():
                self._expired[task] = began
                task.cancel()
        if self._open and self._loop is not None and not self._loop.is_closed():
            self._timer = self._loop.call_later(SWEEP_S, self._sweep)
