"""Who goes next at ingest when the process is behind: a fair queue across tokens.

The in-flight limits (`service.ingest.InFlightLimit`) bound how many requests a token holds,
not how much of the process's time it takes: a token sending at ten times its share of a
loaded process's rate filled the loop's queue with its requests, and every other token's
requests waited behind them (1.3-15 s p99 in `bench/small_writers.py`'s fairness case).

Each token's recent rate is counted (requests let in, decayed with a half-life of
`HALF_LIFE_S`). While the process is behind (`busy()`: the event loop runs late, or its
group commits take longer than their recent best; `Ingestion.behind` in `service.ingest`),
a request whose token's recent rate is at least its share waits; a token's share is
`SHARE_FACTOR` times the mean recent rate of the other tokens, and at least `MIN_SHARE`
(about 11 requests a second). The waiting requests are let in one token at a time, in turn
(round robin across tokens, each token's own in arrival order), as the process catches up
or their token's rate falls within its share, and in any case after `max_wait_s`, so that
no request waits for ever. While a token's keep-alive connections wait, it sends nothing
more: the process is left to the others.

The share is close to an equal one (1.25 times the others' mean, not twice it): a greedy
client is limited by its own connections, each waiting for its answer like everyone else's,
and at twice the others' mean it still took the process past what it can serve, so every
token's requests queued (docs/performance.md, "Many small writers", round 7). Tokens of
equal rates are not held: their decayed counts differ by a few percent.

Concurrency is no measure of share here: when every request is late, every token holds
many, and a greedy token is capped by its own connections.

A single token (one fleet behind one token) is never held: there is no other to wait for.
The others are the tokens active now: one with no request let in for `QUIET_S` is
forgotten at once, not when its decayed count has faded.
Only the event loop's thread touches the queue, so plain containers need no lock.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

SHARE_FACTOR = 1.25
HALF_LIFE_S = 0.5
# In decayed requests: a steady rate r holds about r * HALF_LIFE_S / ln 2 of them.
MIN_SHARE = 8.0
# A token that has had no request let in for this long is no longer counted among the
# active: it competes with nobody now. Its decayed count would otherwise linger for seconds,
# and, near zero, pull the others' mean down so that the one token still sending looked
# greedy (held whenever the process was behind, right after the others went quiet).
QUIET_S = 0.25


class FairQueue:
    def __init__(self, busy: Callable[[], bool], *, max_wait_s: float,
                 clock: Callable[[], float]) -> None:
        self._busy = busy
        self.max_wait_s = max_wait_s
        self._clock = clock
        # Each token's decayed count of requests let in, as of an instant (the last one let
        # in), in the order of those instants, so the quiet are found at its front; and
        # their sum (which decays at the same rate, so it stays exact).
        self._recent: dict[str, tuple[float, float]] = {}
        self._sum, self._sum_at = 0.0, clock()
        # A token's waiting requests (when each began to wait, and its turn), in arrival
        # order; the dict's order is the rotation: the token let in last goes to its end.
        self.waiting: dict[str, deque[tuple[float, asyncio.Future[None]]]] = {}
        self.held = 0  # requests that have had to wait (a counter, for the metrics)

    @staticmethod
    def _decayed(value: float, since: float, now: float) -> float:
        return value * 0.5 ** ((now - since) / HALF_LIFE_S)

    def recent(self, token: str, now: float | None = None) -> float:
        """`token`'s decayed count of requests let in."""
        now = self._clock() if now is None else now
        value, at = self._recent.get(token, (0.0, now))
        return self._decayed(value, at, now)

    def share(self, token: str, now: float | None = None) -> float:
        """The recent count `token` may reach while the process is behind: a multiple of the
        other tokens' mean; no limit when there is no other."""
        now = self._clock() if now is None else now
        others = len(self._recent) - (token in self._recent)
        if others <= 0:
            return float("inf")
        total = self._decayed(self._sum, self._sum_at, now)
        return max(MIN_SHARE, SHARE_FACTOR * (total - self.recent(token, now)) / others)

    def _may_start(self, token: str, now: float) -> bool:
        return not self._busy() or self.recent(token, now) < self.share(token, now)

    def enter(self, token: str) -> asyncio.Future[None] | None:
        """None: `token`'s request goes in now. Else its turn, to be awaited (`wait`)."""
        now = self._clock()
        if token not in self.waiting and self._may_start(token, now):
            self._count(token, now)
            return None
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.setdefault(token, deque()).append((now, turn))
        self.held += 1
        return turn

    async def wait(self, token: str, turn: asyncio.Future[None]) -> None:
        try:
            await turn
        except asyncio.CancelledError:  # the client went away while it waited
            self._forget(token, turn)
            raise

    def let_in(self) -> int:
        """Let waiting requests in, one token at a time in turn, while their tokens are
        within their share (or the loop has caught up), and every request that has waited
        `max_wait_s`; how many were let in."""
        let = 0
        now = self._clock()
        overdue = now - self.max_wait_s
        while self.waiting:
            passed = False
            for token in list(self.waiting):
                queue = self.waiting[token]
                if queue[0][0] <= overdue or self._may_start(token, now):
                    _, turn = queue.popleft()
                    del self.waiting[token]
                    if queue:
                        self.waiting[token] = queue  # to the end of the rotation
                    if turn.done():
                        continue  # cancelled: its request is forgetting it
                    self._count(token, now)
                    turn.set_result(None)
                    let += 1
                    passed = True
            if not passed:
                break
        return let

    def tick(self) -> None:
        """Periodically (the loop-lag probe's tick): forget the tokens that have gone
        quiet, then let in who may go now."""
        now = self._clock()
        quiet = now - QUIET_S
        gone = []
        for token, (_value, at) in self._recent.items():  # oldest first: stop at the active
            if at > quiet:
                break
            if token not in self.waiting:
                gone.append(token)
        for token in gone:
            value, at = self._recent.pop(token)
            left = self._decayed(value, at, now)
            self._sum = max(0.0, self._decayed(self._sum, self._sum_at, now) - left)
            self._sum_at = now
        if self.waiting:
            self.let_in()

    def _count(self, token: str, now: float) -> None:
        # `recent` and `_decayed` inlined: this runs for every request let in.
        value, at = self._recent.pop(token, (0.0, now))  # re-inserted last: the newest
        self._recent[token] = (value * 0.5 ** ((now - at) / HALF_LIFE_S) + 1.0, now)
        self._sum = self._sum * 0.5 ** ((now - self._sum_at) / HALF_LIFE_S) + 1.0
        self._sum_at = now

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
