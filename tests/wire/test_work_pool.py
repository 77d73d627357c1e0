"""A request's decoding and validation run in a bounded pool of worker
processes, never on the event loop; a full pool answers 503 with Retry-After at once."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import uuid
from datetime import UTC, datetime

import orjson
import pytest

from service import ingest
from service.errors import Unavailable
from service.work_pool import WORKER_NICENESS, WorkPool


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
        assert "ETT_WORK_PROCESSES" in refused.value.message
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


def test_worker_processes_run_jobs_away_from_the_loop_and_a_dead_one_is_a_503(
        ) -> None:
    async def scenario() -> None:
        pool = WorkPool(workers=1, queue=0, processes=True, preload=("service.ingest",))
        worker = await pool.run(os.getpid)
        assert worker != os.getpid()
        # Below the serving process: a large body waits, not every other client.
        assert await pool.run(os.nice, 0) == min(19, os.nice(0) + WORKER_NICENESS)
        # A worker killed under its job (out of memory, say): that request is a 503 the
        # client retries, and the next job gets a new worker.
        with pytest.raises(Unavailable) as died:
            await pool.run(os.kill, worker, signal.SIGKILL)
        assert died.value.headers["Retry-After"] == "1"
        assert "stopped while decoding" in died.value.message
        assert await pool.run(os.getpid) not in (worker, os.getpid())
        assert pool.pending == 0

    asyncio.run(scenario())


def test_a_batch_of_events_is_decided_off_the_event_loop(api, monkeypatch) -> None:
    ran: list[tuple[str, bool]] = []
    real = WorkPool.run

    async def run(self, fn, *args, **kwargs):
        ran.append((fn.__name__, self.processes))
        return await real(self, fn, *args, **kwargs)

    monkeypatch.setattr(WorkPool, "run", run)
    now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    events = [{"event_id": str(uuid.uuid4()), "ts": now, "job_id": "off-loop", "attempt": 0,
               "model": "m", "type": "heartbeat"} for _ in range(20)]
    body = orjson.dumps({"events": events})
    assert len(body) > ingest.INLINE_MAX_BYTES
    r = api.post("/v1/events", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 202 and r.json()["accepted"] == 20, r.text
    assert ran == [("decide_events", True)]


def test_worker_processes_end_when_their_server_is_killed(tmp_path) -> None:
    import subprocess
    import sys
    import time

    script = tmp_path / "server.py"
    script.write_text(
        "import asyncio, os, sys, time\n"
        "from service.work_pool import WorkPool\n"
        "async def main():\n"
        "    pool = WorkPool(workers=1, queue=0, processes=True)\n"
        "    print(await pool.run(os.getpid), flush=True)\n"
        "    time.sleep(600)\n"
        "if __name__ == '__main__':\n"
        "    asyncio.run(main())\n")
    server = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                              text=True, env={**os.environ})
    worker = int(server.stdout.readline())
    os.kill(worker, 0)  # running
    server.kill()  # SIGKILL: no clean-up of its own
    server.wait()
    for _ in range(100):
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"worker {worker} outlived its killed server")
