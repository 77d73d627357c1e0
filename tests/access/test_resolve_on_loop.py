"""`Authenticator.resolve_on_loop`: the requests of one token that miss the cache together
share one lookup in a worker thread; its answer or its error reaches each of them, and a
request that goes away does not take the others' answer with it."""

from __future__ import annotations

import asyncio
import threading

import pytest

from service.access.auth import Authenticator, Principal
from service.errors import Unauthorized

WRITER = Principal("writer", "w1", team="ranking", model_patterns=("rank_*",))


class SlowStore:
    """A token store whose cache is empty and whose database takes a while to answer."""

    def __init__(self, answer: Principal | None) -> None:
        self.answer = answer
        self.lookups = 0
        self.release = threading.Event()

    def lookup(self, _token: str) -> Principal | None:
        self.lookups += 1
        self.release.wait(5)
        return self.answer

    def peek(self, _token: str) -> Principal | None:
        return None


async def _waiting(tasks: list[asyncio.Task], store: SlowStore) -> None:
    for _ in range(50):  # until the worker thread is in the lookup
        await asyncio.sleep(0.01)
        if store.lookups:
            break
    assert not any(t.done() for t in tasks)


def test_concurrent_misses_of_one_token_share_one_lookup() -> None:
    store = SlowStore(WRITER)
    auth = Authenticator("admin-secret", lookup=store.lookup, peek=store.peek)

    async def scene() -> list[Principal]:
        tasks = [asyncio.ensure_future(auth.resolve_on_loop("Bearer tok")) for _ in range(50)]
        await _waiting(tasks, store)
        store.release.set()
        return await asyncio.gather(*tasks)

    assert asyncio.run(scene()) == [WRITER] * 50
    assert store.lookups == 1
    assert not auth._resolving


def test_the_shared_error_reaches_every_waiter_and_the_next_miss_looks_up_again() -> None:
    store = SlowStore(None)  # unknown or revoked
    auth = Authenticator("admin-secret", lookup=store.lookup, peek=store.peek)

    async def scene() -> None:
        tasks = [asyncio.ensure_future(auth.resolve_on_loop("Bearer tok")) for _ in range(5)]
        await _waiting(tasks, store)
        store.release.set()
        for result in await asyncio.gather(*tasks, return_exceptions=True):
            assert isinstance(result, Unauthorized)
        with pytest.raises(Unauthorized):
            await auth.resolve_on_loop("Bearer tok")

    asyncio.run(scene())
    assert store.lookups == 2


def test_a_waiter_that_goes_away_leaves_the_lookup_to_the_others() -> None:
    store = SlowStore(WRITER)
    auth = Authenticator("admin-secret", lookup=store.lookup, peek=store.peek)

    async def scene() -> Principal:
        first = asyncio.ensure_future(auth.resolve_on_loop("Bearer tok"))
        second = asyncio.ensure_future(auth.resolve_on_loop("Bearer tok"))
        await _waiting([first, second], store)
        first.cancel()
        store.release.set()
        with pytest.raises(asyncio.CancelledError):
            await first
        return await second

    assert asyncio.run(scene()) == WRITER
    assert store.lookups == 1
