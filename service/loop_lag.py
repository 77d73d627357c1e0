"""How far behind the event loop runs: a callback asked for every `interval_s`, and how late
it ran.

A loop that runs a callback late by L ms has made every ready request wait about L ms too,
so the lag is the loop's own queueing delay, measured where it happens, with no request
needed to observe it. `lag_s` is the latest lateness, or half the previous figure if that is
more (one quick tick after a stall does not clear it at once). `on_tick` runs after each
tick (the fair queue lets waiting requests in).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class LoopLag:
    def __init__(self, interval_s: float = 0.01,
                 on_tick: Callable[[], object] | None = None) -> None:
        self.interval_s = interval_s
        self.on_tick = on_tick
        self.lag_s = 0.0
        self.worst_s = 0.0  # the largest lateness seen since the probe started
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None

    def follow(self, loop: asyncio.AbstractEventLoop) -> None:
        """Probe `loop` (the loop serving the requests; again should another take over)."""
        if loop is self._loop:
            return
        self.stop()
        self._loop, self.lag_s = loop, 0.0
        self._schedule(loop.time())

    def _schedule(self, now: float) -> None:
        assert self._loop is not None
        due = now + self.interval_s
        self._handle = self._loop.call_at(due, self._tick, due)

    def _tick(self, due: float) -> None:
        assert self._loop is not None
        now = self._loop.time()
        late = max(0.0, now - due)
        self.lag_s = max(late, self.lag_s / 2)
        self.worst_s = max(self.worst_s, late)
        self._schedule(now)
        if self.on_tick is not None:
            self.on_tick()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._loop = None
