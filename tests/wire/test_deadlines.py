"""Body deadlines without a timer per request (service.wire.deadlines): a stalled read ends
in 408 at its deadline, a read in time is left alone, and another cancellation stays one."""

from __future__ import annotations

import asyncio
import time

import pytest
from starlette.requests import ClientDisconnect

from service.errors import RequestTimeout
from service.wire.body import receive_body
from service.wire.deadlines import SWEEP_S, BodyDeadlines

HEADERS = [(b"content-type", b"application/json")]


def chunks(*parts: bytes, delay_s: float = 0.0, then_stall: bool = False):
    """An ASGI `receive` giving `parts` (the last one ends the body unless it stalls)."""
    queue = list(parts)

    async def receive() -> dict:
        if delay_s:
            await asyncio.sleep(delay_s)
        if not queue:
            await asyncio.Event().wait()  # a client that never sends the rest
        part = queue.pop(0)
        return {"type": "http.request", "body": part,
                "more_body": bool(queue) or then_stall}

    return receive


async def read(deadlines: BodyDeadlines, receive) -> bytearray:
    return await receive_body(HEADERS, receive, limit=1 << 20, deadlines=deadlines)


def test_a_body_in_one_message_or_many_is_read_whole() -> None:
    async def main() -> None:
        deadlines = BodyDeadlines(5)
        assert await read(deadlines, chunks(b'{"a": 1}')) == b'{"a": 1}'
        assert await read(deadlines, chunks(b'{"a"', b": 1", b"}")) == b'{"a": 1}'

    asyncio.run(main())


def test_a_stalled_body_ends_in_408_at_its_deadline_and_the_task_is_not_left_cancelled(
        ) -> None:
    async def main() -> None:
        deadlines = BodyDeadlines(0.2)
        task = asyncio.current_task()
        assert task is not None
        started = time.monotonic()
        with pytest.raises(RequestTimeout, match=r"within 0.2 s \(5 bytes received\)"):
            await read(deadlines, chunks(b'{"a":', then_stall=True))
        waited = time.monotonic() - started
        assert 0.2 <= waited < 0.2 + SWEEP_S + 0.5
        assert task.cancelling() == 0  # taken back, as asyncio.timeout does
        await asyncio.sleep(0.01)  # and nothing cancels it later

    asyncio.run(main())


def test_a_read_in_time_is_never_cancelled_afterwards() -> None:
    async def main() -> None:
        deadlines = BodyDeadlines(0.15)
        assert await read(deadlines, chunks(b"{}", delay_s=0.05)) == b"{}"
        await asyncio.sleep(0.15 + 2 * SWEEP_S)  # past where its deadline was

    asyncio.run(main())


def test_reads_started_at_different_times_end_at_their_own_deadlines() -> None:
    async def main() -> list[float]:
        deadlines = BodyDeadlines(0.3)
        started = time.monotonic()

        async def stalled(after_s: float) -> float:
            await asyncio.sleep(after_s)
            with pytest.raises(RequestTimeout):
                await read(deadlines, chunks(b"{", then_stall=True))
            return time.monotonic() - started

        fine = asyncio.create_task(read(deadlines, chunks(b"{}", delay_s=0.25)))
        ended = await asyncio.gather(stalled(0.0), stalled(0.2))
        assert await fine == b"{}"
        return ended

    first, second = asyncio.run(main())
    assert 0.3 <= first < 0.3 + SWEEP_S + 0.5
    assert 0.5 <= second < 0.5 + SWEEP_S + 0.5


def test_another_cancellation_is_raised_as_one_not_taken_for_a_timeout() -> None:
    async def main() -> None:
        deadlines = BodyDeadlines(5)
        reading = asyncio.create_task(read(deadlines, chunks(b"{", then_stall=True)))
        await asyncio.sleep(0.05)
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading

    asyncio.run(main())


def test_a_client_that_hangs_up_is_a_disconnect() -> None:
    async def main() -> None:
        async def receive() -> dict:
            return {"type": "http.disconnect"}

        with pytest.raises(ClientDisconnect):
            await read(BodyDeadlines(5), receive)

    asyncio.run(main())


def test_a_new_event_loop_is_followed() -> None:
    deadlines = BodyDeadlines(0.1)
    for _ in range(2):  # each asyncio.run is a loop of its own (as each test client's)
        async def main() -> None:
            with pytest.raises(RequestTimeout):
                await read(deadlines, chunks(b"{", then_stall=True))

        asyncio.run(main())
