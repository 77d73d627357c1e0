"""A bounded pool of worker threads for a request's CPU work (decoding, mapping,
validating), so that the event loop only reads bodies and answers.

Bounded twice: `workers` threads run jobs, and at most `queue` more wait for one. A job
beyond that is refused at once with 503 and `Retry-After` (the caller retries) instead of
waiting in memory behind the others. Only the event loop's thread submits, so the counter
needs no lock.

Threads rather than processes: what runs here is C decoding (orjson, msgspec, protobuf)
interleaved with Python, and CPython hands the interpreter back to the loop's thread at
least every `sys.getswitchinterval()` (5 ms), so a job never holds the loop for longer
than one C call, and each call is bounded by the request's limits (its body size, spans,
attributes, nesting depth) checked before the work.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from service.errors import Unavailable

P = ParamSpec("P")
T = TypeVar("T")


class WorkPool:
    RETRY_AFTER_S = 1

    def __init__(self, workers: int, queue: int, name: str = "ett-work") -> None:
        self.workers = workers
        self.queue = queue
        self.pending = 0
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`fn(*args, **kwargs)` in a worker thread; 503 if the pool and its queue are full."""
        if self.pending >= self.workers + self.queue:
            raise Unavailable(f"the request workers are busy ({self.workers} running,"
                              f" {self.queue} waiting: ETT_WORK_THREADS, ETT_WORK_QUEUE);"
                              " retry later", retry_after_s=self.RETRY_AFTER_S)
        loop = asyncio.get_running_loop()
        job = self._executor.submit(lambda: fn(*args, **kwargs))
        self.pending += 1
        # Counted until the job ends, not until its caller stops waiting: a client that
        # hangs up does not free a slot its work still holds.
        job.add_done_callback(lambda _job: loop.call_soon_threadsafe(self._done))
        return await asyncio.wrap_future(job)

    def _done(self) -> None:
        self.pending -= 1

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
