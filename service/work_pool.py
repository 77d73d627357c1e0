"""A bounded pool of workers for a request's CPU work (decoding, mapping, validating), so
that the event loop only reads bodies and answers.

Bounded twice: `workers` workers run jobs, and at most `queue` more wait for one. A job
beyond that is refused at once with 503 and `Retry-After` (the caller retries) instead of
waiting in memory behind the others. Only the event loop's thread submits, so the counter
needs no lock.

Processes, not threads, for request bodies: a worker thread shares the interpreter lock
with the loop, and one C call holds it throughout (orjson reading a 5 MB body: 0.15-0.3 s
on the shared 2-core machine), and even between calls the loop waits up to the 5 ms switch
interval each time it wants the lock back, which a single-event post does a dozen times
(docs/performance.md, "Loop stall"). A worker process costs the loop only the pickling of
the job and of its answer, both bounded by the body limit. The processes are forked from
a server process (`forkserver`) that has imported `preload` once, never from the serving
process with its threads and sockets; one set of them serves every pool of the same size
in a process (tests build many apps).
"""

from __future__ import annotations

import asyncio
import copyreg
import multiprocessing
import os
import signal
import threading
import time
import types
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, ParamSpec, TypeVar

from service.errors import Unavailable

P = ParamSpec("P")
T = TypeVar("T")

_PROCESSES: dict[int, ProcessPoolExecutor] = {}
_PROCESSES_LOCK = threading.Lock()
# Worker processes yield the CPU to the serving process (and the database): where cores
# are short, a large body waits rather than every other client; where they are not, the
# niceness costs nothing.
WORKER_NICENESS = 10


def read_only(mapping: dict[Any, Any]) -> types.MappingProxyType[Any, Any]:
    return types.MappingProxyType(mapping)


def _mapping_proxy(view: types.MappingProxyType[Any, Any]
                   ) -> tuple[Callable[..., Any], tuple[dict[Any, Any]]]:
    return read_only, (dict(view),)


# A job's arguments may hold read-only views (the taxonomy's model owners): they travel as
# read-only views of a copy.
copyreg.pickle(types.MappingProxyType, _mapping_proxy)


def _worker_started(niceness: int, server_pid: int) -> None:
    """In each worker process: step below the server, leave Ctrl-C to the server (it ends
    the workers), and end when the server is gone. A pool's workers wait on a queue whose
    both ends they hold, so a server killed with SIGKILL would otherwise leave them running
    for ever, holding its stdout open."""
    os.nice(niceness)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_end_with, args=(server_pid,), name="ett-work-orphan",
                     daemon=True).start()


def _end_with(server_pid: int) -> None:
    while not _gone(server_pid):
        time.sleep(0.5)
    os._exit(0)


def _gone(pid: int) -> bool:
    """Whether the process has ended, a zombie nobody has reaped yet included (its parent may
    be waiting for the end of the stdout the workers share with it)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):  # PermissionError: the pid was reused
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            state = stat.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state in ("Z", "X")


def _process_pool(workers: int, preload: Sequence[str]) -> ProcessPoolExecutor:
    with _PROCESSES_LOCK:
        pool = _PROCESSES.get(workers)
        if pool is None:
            context = multiprocessing.get_context("forkserver")
            if preload:
                context.set_forkserver_preload(list(preload))
            pool = _PROCESSES[workers] = ProcessPoolExecutor(
                max_workers=workers, mp_context=context, initializer=_worker_started,
                initargs=(WORKER_NICENESS, os.getpid()))
        return pool


class WorkPool:
    RETRY_AFTER_S = 1

    def __init__(self, workers: int, queue: int, name: str = "ett-work", *,
                 processes: bool = False, preload: Sequence[str] = ()) -> None:
        """`processes`: run jobs in worker processes (then a job and its arguments must
        pickle: a module-level function and plain data); else in threads named `name`.
        `preload`: modules the worker processes import before their first job."""
        self.workers = workers
        self.queue = queue
        self.processes = processes
        self.pending = 0
        self._preload = tuple(preload)
        self._threads = None if processes else ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix=name)
        if processes:
            # Started now, beside the loop: the first job would otherwise wait, on the
            # loop, for the fork server to import `preload` (3 s under load, measured).
            threading.Thread(target=self._start_processes, name=f"{name}-start",
                             daemon=True).start()

    def _start_processes(self) -> None:
        pool = _process_pool(self.workers, self._preload)
        try:
            for job in [pool.submit(os.getpid) for _ in range(self.workers)]:
                job.exception()
        except (RuntimeError, BrokenProcessPool):
            pass  # the process is ending, or a worker died: the next job starts them

    def _executor(self) -> Executor:
        return self._threads or _process_pool(self.workers, self._preload)

    def _busy(self) -> Unavailable:
        return Unavailable(f"the request workers are busy ({self.workers} running,"
                           f" {self.queue} waiting: ETT_WORK_PROCESSES, ETT_WORK_QUEUE);"
                           " retry later", retry_after_s=self.RETRY_AFTER_S)

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`fn(*args, **kwargs)` in a worker; 503 if the pool and its queue are full, or
        if a worker process died under the job (killed, out of memory)."""
        if self.pending >= self.workers + self.queue:
            raise self._busy()
        loop = asyncio.get_running_loop()
        executor = self._executor()
        try:
            job = executor.submit(fn, *args, **kwargs)
        except BrokenProcessPool:
            job = self._renewed(executor).submit(fn, *args, **kwargs)
        self.pending += 1
        # Counted until the job ends, not until its caller stops waiting: a client that
        # hangs up does not free a slot its work still holds.
        job.add_done_callback(lambda _job: loop.call_soon_threadsafe(self._done))
        try:
            return await asyncio.wrap_future(job)
        except BrokenProcessPool:
            self._renewed(executor)
            raise Unavailable("a request worker stopped while decoding this request;"
                              " retry later", retry_after_s=self.RETRY_AFTER_S) from None

    def _renewed(self, broken: Executor) -> Executor:
        """A new set of worker processes in place of a broken one (once per breakage)."""
        with _PROCESSES_LOCK:
            if _PROCESSES.get(self.workers) is broken:
                del _PROCESSES[self.workers]
        broken.shutdown(wait=False, cancel_futures=True)
        return self._executor()

    def _done(self) -> None:
        self.pending -= 1

    def close(self) -> None:
        """Stop this pool's threads (worker processes serve the whole process)."""
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)
