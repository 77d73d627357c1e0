"""How far behind storing runs: each group commit's time, from its first batch to the COMMIT
that answers it, against the best the store has done lately.

The event loop can keep up while storing does not. On two cores shared with PostgreSQL, a
loaded `ett serve` ran its loop under 10 ms late while its group commits took 15-50 ms
instead of 5-8: PostgreSQL's backends waited for a core, and every request waited for
them (docs/performance.md, "Many small writers", round 7). The loop's lateness alone
(`service.loop_lag`) missed that, so the fair queue let a greedy token fill the process.

A commit's time also holds what does not depend on load: the group's gathering window, the
round trips, the WAL flush, all slower on some databases than others. So the measure is the
time above the store's recent best (`floor_s`: the quickest group of the current and the
previous `WINDOW_S`), not the time itself: a database whose every commit takes 20 ms is not
behind, one whose commits went from 5 to 20 ms is.
"""

from __future__ import annotations

INF = float("inf")


class StoreLag:
    WINDOW_S = 60.0

    def __init__(self) -> None:
        # The latest group's time, or half the previous figure if that is more (one quick
        # group after a slow stretch does not clear it at once), as `LoopLag.lag_s`.
        self.lag_s = 0.0
        self._best, self._best_before = INF, INF
        self._window_at: float | None = None

    def observe(self, took_s: float, now: float) -> None:
        """A group committed `took_s` after its first batch came, at `now` (the loop's
        clock)."""
        self.lag_s = max(took_s, self.lag_s / 2)
        if self._window_at is None or now - self._window_at >= self.WINDOW_S:
            self._window_at = now
            self._best_before, self._best = self._best, took_s
        elif took_s < self._best:
            self._best = took_s

    @property
    def floor_s(self) -> float:
        """The quickest group of the current and the previous window (0 before any)."""
        best = min(self._best, self._best_before)
        return 0.0 if best == INF else best

    @property
    def behind_s(self) -> float:
        """How much longer than the floor the latest groups took."""
        return max(0.0, self.lag_s - self.floor_s)
