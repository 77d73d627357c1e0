"""A request's decoding and validation run in a bounded pool of worker
threads, never on the event loop; a full pool answers 503 with Retry-After at once."""

from __future__ import annotations

import asyncio
import threading
import uuid
from datetime import UTC, datetime

import orjson
import pytest

from service import ingest
from service.errors import Unavailable
from service.work_pool import WorkPool


def test_a_full_pool_refuses_at_once_with_retry_after_and_frees_its_places() -> None:
    async def scenario() -> None:
        pool = WorkPool(workers=1, queue=1)
        gate = threading.Event()
        running = [asyncio.ensure_future(pool.run(gate.wait)) for _ in range(2)]
        await asyncio.sleep(0)
        assert pool.pending == 2
        with pytest.raises(Unavailable) as refused:
            await pool.run(lambda: 1)
        assert refused.value.headers["Retry-After"] == "1"
        assert "ETT_WORK_THREADS" in refused.value.message
        gate.set()
        assert await asyncio.gather(*running) == [True, True]
        await asyncio.sleep(0)
        assert pool.pending == 0
        assert await pool.run(lambda x: x * 2, 21) == 42
        pool.close()

    asyncio.run(scenario())


def test_a_waiter_that_gives_up_does_not_free_the_place_its_job_holds() -> None:
    async def scenario() -> None:
        pool = WorkPool(workers=1, queue=0)
        gate = threading.Event()
        waiter = asyncio.ensure_future(pool.run(gate.wait))
        await asyncio.sleep(0)
        waiter.cancel()
        await asyncio.sleep(0)
        with pytest.raises(Unavailable):
            await pool.run(lambda: 1)
        gate.set()
        for _ in range(100):
            if pool.pending == 0:
                break
            await asyncio.sleep(0.01)
        assert pool.pending == 0
        pool.close()

    asyncio.run(scenario())


def test_a_batch_of_events_is_decided_off_the_event_loop(api, monkeypatch) -> None:
    threads: list[str] = []
    real = ingest.decide_whole

    def decide_whole(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(ingest, "decide_whole", decide_whole)
    now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    events = [{"event_id": str(uuid.uuid4()), "ts": now, "job_id": "off-loop", "attempt": 0,
               "model": "m", "type": "heartbeat"} for _ in range(20)]
    body = orjson.dumps({"events": events})
    assert len(body) >= ingest.WHOLE_MIN_BYTES
    r = api.post("/v1/events", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 202 and r.json()["accepted"] == 20, r.text
    assert len(threads) == 1 and threads[0].startswith("ett-work"), threads
