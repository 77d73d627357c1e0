"""Who goes next at ingest when the event loop is behind: a fair queue across tokens.

The in-flight limits (`service.ingest.InFlightLimit`) bound how many requests a token holds,
not how much of the process's time it takes: a token sending at ten times its share of a
loaded process's rate filled the loop's queue with its requests, and every other token's
requests waited behind them (1.3-15 s p99 in `bench/small_writers.py`'s fairness case).

Here, while the loop is behind (`busy()`: the loop-lag probe, `service.loop_lag`, saw a
callback run late by at least `ETT_INGEST_FAIR_LAG_MS`), a request whose token already has
its share of the requests at work waits; a token's share is `SHARE_FACTOR` times what each
other token (with requests at work or waiting) holds on average, and at least `MIN_SHARE`. The
waiting requests are let in one token at a time, in turn (round robin across tokens, each
token's own in arrival order), as requests end, as the loop catches up, and in any case
after `max_wait_s`, so that no request waits for ever. While a token's keep-alive
connections wait, it sends nothing more: the loop is left to the others.

A single token (one fleet behind one token) is never held: there is no other to wait for.
Only the event loop's thread touches the queue, so plain containers need no lock.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

SHARE_FACTOR = 2.0
MIN_SHARE = 4


class FairQueue:
    def __init__(self, busy: Callable[[], bool], *, max_wait_s: float,
                 clock: Callable[[], float]) -> None:
        self._busy = busy
        self.max_wait_s = max_wait_s
        self._clock = clock
        self.at_work: dict[str, int] = {}
        # A token's waiting requests (when each began to wait, and its turn), in arrival
        # order; the dict's order is the rotation: the token let in last goes to its end.
        self.waiting: dict[str, deque[tuple[float, asyncio.Future[None]]]] = {}
        self.total = 0
        self.held = 0  # requests that have had to wait (a counter, for the metrics)

    def share(self, token: str) -> float:
        """How many requests at work `token` may hold while the loop is behind: a multiple
        of what the other tokens (with requests at work or waiting) hold on average; all
        of them when there is no other."""
        tokens = len(self.at_work) + sum(t not in self.at_work for t in self.waiting)
        others = tokens - (token in self.at_work or token in self.waiting)
        if not others:
            return float("inf")
        mean = (self.total - self.at_work.get(token, 0)) / others
        return max(MIN_SHARE, SHARE_FACTOR * mean)

    def _may_start(self, token: str) -> bool:
        return not self._busy() or self.at_work.get(token, 0) < self.share(token)

    def enter(self, token: str) -> asyncio.Future[None] | None:
        """None: `token`'s request is at work now. Else its turn, to be awaited through
        `wait` (`leave` once the work ends, either way)."""
        if token not in self.waiting and self._may_start(token):
            self._start(token)
            return None
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.setdefault(token, deque()).append((self._clock(), turn))
        self.held += 1
        return turn

    async def wait(self, token: str, turn: asyncio.Future[None]) -> None:
        try:
            await turn
        except asyncio.CancelledError:  # the client went away while it waited
            if turn.done() and not turn.cancelled():
                self.leave(token)  # let in just as it was cancelled
            else:
                self._forget(token, turn)
            raise

    def leave(self, token: str) -> None:
        left = self.at_work[token] - 1
        if left:
            self.at_work[token] = left
        else:
            del self.at_work[token]
        self.total -= 1
        if self.waiting:
            self.let_in()

    def let_in(self) -> int:
        """Let waiting requests in, one token at a time in turn, while their tokens are
        within their share (or the loop has caught up), and every request that has waited
        `max_wait_s`; how many were let in."""
        let = 0
        overdue = self._clock() - self.max_wait_s
        while self.waiting:
            passed = False
            for token in list(self.waiting):
                queue = self.waiting[token]
                if queue[0][0] <= overdue or self._may_start(token):
                    _, turn = queue.popleft()
                    del self.waiting[token]
                    if queue:
                        self.waiting[token] = queue  # to the end of the rotation
                    if turn.done():
                        continue  # cancelled: its request is forgetting it
                    self._start(token)
                    turn.set_result(None)
                    let += 1
                    passed = True
            if not passed:
                break
        return let

    def _start(self, token: str) -> None:
        self.at_work[token] = self.at_work.get(token, 0) + 1
        self.total += 1

    def _forget(self, token: str, turn: asyncio.Future[None]) -> None:
        queue = self.waiting.get(token)
        if queue is None:
            return
        for item in queue:
            if item[1] is turn:
                queue.remove(item)
                break
        if not queue:
            del self.waiting[token]
