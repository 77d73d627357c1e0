"""The fair queue across tokens (service/fair_queue.py): who waits, and in what order the
waiting are let in. The loop's lateness and the clock are given, so every order here is
decided by the queue alone, never by timing."""

from __future__ import annotations

import asyncio

import pytest

from service.fair_queue import MIN_SHARE, FairQueue


class Scene:
    def __init__(self, max_wait_s: float = 10.0) -> None:
        self.busy = False
        self.now = 0.0
        self.queue = FairQueue(lambda: self.busy, max_wait_s=max_wait_s,
                               clock=lambda: self.now)
        self.order: list[str] = []

    def enter(self, token: str, label: str) -> asyncio.Future[None] | None:
        turn = self.queue.enter(token)
        if turn is None:
            self.order.append(label)
        else:
            turn.add_done_callback(lambda _t: self.order.append(label))
        return turn

    def greedy_start(self) -> None:
        """The hog let in 40 requests, nine other tokens one each, then the loop fell behind."""
        for i in range(40):
            self.enter("hog", f"warm-h{i}")
        for t in "bcdefghij":
            self.enter(t, f"warm-{t}")
        self.busy = True


async def _settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


def test_nothing_waits_while_the_loop_keeps_up() -> None:
    async def scene() -> None:
        s = Scene()
        turns = [s.enter("hog", f"h{i}") for i in range(50)] + [s.enter("b", "b0")]
        assert turns == [None] * 51
        assert s.queue.held == 0

    asyncio.run(scene())


def test_a_single_token_is_never_held_however_late_the_loop() -> None:
    async def scene() -> None:
        s = Scene()
        s.busy = True
        assert all(s.enter("fleet", f"f{i}") is None for i in range(200))

    asyncio.run(scene())


def test_a_greedy_token_waits_while_the_others_go_straight_in() -> None:
    async def scene() -> None:
        s = Scene()
        s.greedy_start()
        waiting = [s.enter("hog", f"h{i}") for i in range(3)]
        assert all(w is not None for w in waiting)
        # Another token's request is not behind the hog's: in at once.
        assert s.enter("b", "b1") is None
        # Its rate decays: 40 halves to under MIN_SHARE (8) after 2.4 half-lives.
        s.now = 1.1
        assert s.queue.let_in() == 0
        s.now = 1.2
        assert s.queue.recent("hog") < MIN_SHARE
        assert s.queue.let_in() == 1  # and then it is at its share again
        await _settle()
        assert s.order[-2:] == ["b1", "h0"]
        s.busy = False  # the loop caught up: the rest in arrival order
        s.queue.tick()
        await _settle()
        assert s.order[-2:] == ["h1", "h2"] and not s.queue.waiting

    asyncio.run(scene())


def test_the_waiting_are_let_in_one_token_at_a_time_in_turn() -> None:
    async def scene() -> None:
        s = Scene()
        for t in "abc":  # three tokens far over their share
            for i in range(40):
                s.enter(t, f"warm-{t}{i}")
        for t in "defghij":
            s.enter(t, f"warm-{t}")
        s.busy = True
        for i in range(4):
            s.enter("a", f"a{i}")
        for i in range(2):
            s.enter("b", f"b{i}")
        s.enter("c", "c0")
        assert len(s.queue.waiting) == 3
        s.order.clear()
        s.busy = False
        assert s.queue.let_in() == 7
        await _settle()
        assert s.order == ["a0", "b0", "c0", "a1", "b1", "a2", "a3"]
        assert not s.queue.waiting

    asyncio.run(scene())


def test_no_request_waits_longer_than_the_max_wait_even_if_the_loop_stays_behind() -> None:
    async def scene() -> None:
        s = Scene(max_wait_s=1.0)
        s.greedy_start()
        first = s.enter("hog", "late0")
        s.now = 0.5
        second = s.enter("hog", "late1")
        assert s.queue.let_in() == 0
        s.now = 1.0  # the first has waited max_wait_s, the second half of it; the hog's
        assert s.queue.let_in() == 1  # rate (40 halved twice, 10) is still over 8
        await _settle()
        assert first is not None and first.done() and second is not None and not second.done()
        s.now = 1.5
        assert s.queue.let_in() == 1

    asyncio.run(scene())


def test_a_request_whose_client_left_while_waiting_gives_its_place_up() -> None:
    async def scene() -> None:
        s = Scene()
        s.greedy_start()
        turn = s.queue.enter("hog")
        assert turn is not None
        waiter = asyncio.ensure_future(s.queue.wait("hog", turn))
        await _settle()
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert "hog" not in s.queue.waiting
        s.busy = False
        assert s.queue.let_in() == 0

    asyncio.run(scene())


def test_tokens_gone_quiet_are_forgotten_and_hold_nobody_back() -> None:
    async def scene() -> None:
        s = Scene()
        s.greedy_start()
        s.now = 10.0  # twenty half-lives: every count is gone
        s.queue.tick()
        for i in range(40):  # the hog alone now: never held
            assert s.enter("hog", f"h{i}") is None

    asyncio.run(scene())


def test_a_token_at_one_and_a_half_times_the_others_mean_waits_and_equal_ones_do_not() -> None:
    async def scene() -> None:
        s = Scene()
        for i in range(30):
            s.enter("big", f"warm-big{i}")
        for t in "bcd":
            for i in range(20):
                assert s.enter(t, f"warm-{t}{i}") is None
        s.busy = True
        # 30 against the others' 20: at 1.5 times their mean, over its share.
        assert s.enter("big", "big0") is not None
        # Three tokens at 20 each, within a request of one another: each within its share.
        assert all(s.enter(t, f"{t}0") is None for t in "bcd")

    asyncio.run(scene())


def test_the_token_still_sending_after_the_others_went_quiet_is_not_held() -> None:
    async def scene() -> None:
        s = Scene()
        for t in "bcd":
            for i in range(20):
                s.enter(t, f"warm-{t}{i}")
        s.now = 0.1
        for i in range(20):
            s.enter("a", f"warm-a{i}")
        # b, c and d stop; a goes on, and the process falls behind. Their decayed counts
        # would linger for seconds and make a look greedy: quiet tokens compete with nobody.
        s.busy = True
        s.now = 0.4
        s.queue.tick()
        assert all(s.enter("a", f"a{i}") is None for i in range(100))
        assert s.queue.held == 0

    asyncio.run(scene())
