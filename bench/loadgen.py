"""The load generator: a process of its own, so that building and sending requests never
shares the server's interpreter. Bodies are built before the clock starts.

    python -m bench.loadgen batch --url URL --token T --dsn DSN [--clients 4] ...
    python -m bench.loadgen open --url URL --token T --rate 1000 --seconds 60

Prints one JSON line with the measurements.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import os
import random
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import orjson
import psycopg

from service.demo.fleet import FleetSpec, fleet_events

COPY_COLUMNS = ("event_id", "ts", "job_id", "attempt", "model", "type", "phase", "gpus", "team",
                "rank", "attrs", "extra")


def template_events(n: int, seed: int = 11) -> list[dict[str, Any]]:
    """`n` events of the demo fleet's shape from the last day (valid for ingest)."""
    start = datetime.now(UTC) - timedelta(days=1)
    spec = FleetSpec(models=50, seed=seed)
    return [ev for _, ev in itertools.islice(fleet_events(spec, start), n)]


class Ids:
    """Unique event ids, fast (random 128-bit ints; never the same twice in a run)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def __call__(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))


def http_bodies(template: list[dict[str, Any]], batches: int, size: int, ids: Ids) -> list[bytes]:
    out = []
    it = itertools.cycle(template)
    for _ in range(batches):
        out.append(orjson.dumps({"events": [{**next(it), "event_id": ids()}
                                            for _ in range(size)]}))
    return out


def _copy_field(value: Any) -> str:
    if value is None:
        return "\\N"
    if isinstance(value, dict):
        value = orjson.dumps(value).decode()
    return str(value).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")


def copy_payloads(template: list[dict[str, Any]], batches: int, size: int,
                  ids: Ids) -> list[bytes]:
    """The same events as COPY text, one payload per batch."""
    out = []
    it = itertools.cycle(template)
    for _ in range(batches):
        lines = []
        for _ in range(size):
            ev = {**next(it), "event_id": ids()}
            lines.append("\t".join(_copy_field(ev.get(c)) for c in COPY_COLUMNS))
        out.append(("\n".join(lines) + "\n").encode())
    return out


class Conn:
    """A minimal HTTP/1.1 keep-alive client (less client CPU than any library)."""

    def __init__(self, url: str, token: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.head = (f"POST /v1/events HTTP/1.1\r\nHost: {self.host}\r\n"
                     f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n")
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def connect(self) -> None:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def post(self, body: bytes) -> tuple[int, bytes]:
        await self.connect()
        assert self.reader is not None and self.writer is not None
        self.writer.write(f"{self.head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        data = await self.reader.readexactly(length) if length else b""
        return status, data


async def send_batches(url: str, token: str, bodies: list[bytes], clients: int
                       ) -> tuple[float, int, int]:
    """Send every body from `clients` connections; return (seconds, accepted, errors)."""
    queue = list(reversed(bodies))
    accepted = errors = 0
    conns = [Conn(url, token) for _ in range(clients)]
    await asyncio.gather(*(c.connect() for c in conns))  # before the clock starts

    async def client(conn: Conn) -> None:
        nonlocal accepted, errors
        while queue:
            status, data = await conn.post(queue.pop())
            if status == 202:
                accepted += orjson.loads(data)["accepted"]
            else:
                errors += 1
        if conn.writer is not None:
            conn.writer.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(client(c) for c in conns))
    return time.perf_counter() - t0, accepted, errors


def _drain(dsn: str, items: list[Any], clients: int,
           do: Callable[[psycopg.Connection, Any], None], *, autocommit: bool = False,
           meter: CpuMeter | None = None) -> tuple[float, dict[str, float]]:
    """Hand the items to `clients` connections, each taking the next when it is free;
    return the seconds and the CPU the meter saw (read before the connections close, since
    a closing backend's CPU reaches its parent's count only when it has exited)."""
    queue = list(reversed(items))
    lock = threading.Lock()
    conns = [psycopg.connect(dsn, autocommit=autocommit) for _ in range(clients)]

    def work(conn: psycopg.Connection) -> None:
        while True:
            with lock:
                if not queue:
                    return
                item = queue.pop()
            do(conn, item)

    threads = [threading.Thread(target=work, args=(c,)) for c in conns]
    began = meter.start() if meter else None
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    cpu = meter.stop(began) if meter and began else {}
    backends = [c.info.backend_pid for c in conns]
    for c in conns:
        c.close()
    _wait_exited(backends)
    return elapsed, cpu


def _wait_exited(pids: list[int], timeout_s: float = 5.0) -> None:
    """Wait until the closed connections' backends are gone. Exiting costs them CPU too
    (20-60 ms for four after a COPY phase, measured): without the wait the next phase,
    begun at once, was charged it."""
    deadline = time.monotonic() + timeout_s
    while any(os.path.exists(f"/proc/{pid}") for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.005)


def copy_batches(dsn: str, payloads: list[bytes], clients: int,
                 meter: CpuMeter | None = None) -> tuple[float, dict[str, float]]:
    """COPY each payload in its own transaction from `clients` connections."""
    sql = f"COPY events ({', '.join(COPY_COLUMNS)}) FROM STDIN"

    def copy_one(conn: psycopg.Connection, payload: bytes) -> None:
        with conn.transaction(), conn.cursor() as cur, cur.copy(sql) as copy:
            copy.write(payload)

    return _drain(dsn, payloads, clients, copy_one, meter=meter)


def store_batches(dsn: str, bodies: list[bytes], clients: int) -> float:
    """The ingest path's database half alone: the bodies validated beforehand, then stored
    by `store.events.store_rows` (COPY + queue rows) from `clients` connections."""
    from service.access.auth import Principal
    from service.ingest import parse_batch
    from service.store.events import store_rows
    from service.wire.batch import ValidatedBatch, validate_batch

    admin = Principal(role="admin", token_id="bench")
    now = datetime.now(UTC)
    batches = [validate_batch(parse_batch(b, 5000), admin, now=now, max_future_s=300,
                              max_age_s=400 * 86400) for b in bodies]

    def store_one(conn: psycopg.Connection, batch: ValidatedBatch) -> None:
        store_rows(conn, batch.rows)

    return _drain(dsn, batches, clients, store_one, autocommit=True)[0]


def _proc_cpu(pid: int, children: bool = False) -> float:
    """CPU seconds of a process (with `children`: also of its children it has reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def _postgres_cpu(postmaster: int) -> float:
    """PostgreSQL's CPU seconds: the postmaster, its live processes and the exited ones.

    Read again when the postmaster reaped a process during the read: one reaped between its
    children's total and the list of live processes would be counted in neither (the next
    reading would then charge all its CPU to the phase), or, the other way round, twice."""
    while True:
        reaped = _proc_cpu(postmaster, children=True)
        live = sum(_proc_cpu(pid) for pid in _children(postmaster))
        if _proc_cpu(postmaster, children=True) == reaped:
            return reaped + live


def _children(parent: int) -> Iterator[int]:
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == parent:
            yield int(entry)


def _postmaster_pid(dsn: str) -> int | None:
    with psycopg.connect(dsn) as conn:
        data_dir = conn.execute("SHOW data_directory").fetchone()[0]  # type: ignore[index]
    try:
        with open(os.path.join(data_dir, "postmaster.pid")) as fh:
            return int(fh.readline())
    except (OSError, ValueError):
        return None


def _rss_mb(pid: int | None) -> dict[str, float]:
    """The server's resident memory now and its peak so far (VmHWM), in MiB."""
    out = {"now": 0.0, "peak": 0.0}
    if pid:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    out["now" if line[2] == "R" else "peak"] = round(int(line.split()[1]) / 1024, 1)
    return out


class CpuMeter:
    """CPU seconds spent by the API server, PostgreSQL and this generator during a phase."""

    def __init__(self, server_pid: int | None, postmaster: int | None) -> None:
        self.server_pid, self.postmaster = server_pid, postmaster

    def start(self) -> tuple[float, float, float]:
        return (_proc_cpu(self.server_pid) if self.server_pid else 0.0,
                _postgres_cpu(self.postmaster) if self.postmaster else 0.0,
                time.process_time())

    def stop(self, began: tuple[float, float, float]) -> dict[str, float]:
        end = self.start()
        return {k: e - b for k, e, b in zip(("api", "postgres", "loadgen"), end, began,
                                             strict=True)}


def cmd_batch(args: argparse.Namespace) -> dict[str, Any]:
    template = template_events(5000)
    ids = Ids(args.seed)
    per_run = args.batches
    http = [http_bodies(template, per_run, args.size, ids) for _ in range(args.runs)]
    copies = [copy_payloads(template, per_run, args.size, ids) for _ in range(args.runs)]
    direct = [http_bodies(template, per_run, args.size, ids) for _ in range(args.runs)]
    warm = http_bodies(template, 3, args.size, ids)
    asyncio.run(send_batches(args.url, args.token, warm, args.clients))
    http_rates, copy_rates, store_rates, errors = [], [], [], 0
    meter = CpuMeter(args.server_pid, _postmaster_pid(args.dsn))
    cpu: dict[str, list[dict[str, float]]] = {"copy": [], "http": []}
    rss: list[dict[str, float]] = []
    for run in range(args.runs):  # interleaved: both see the same table size and load
        copy_s, copy_cpu = copy_batches(args.dsn, copies[run], args.clients, meter)
        cpu["copy"].append(copy_cpu)
        copy_rates.append(per_run * args.size / copy_s)
        began = meter.start()
        http_s, accepted, errs = asyncio.run(send_batches(args.url, args.token, http[run],
                                                          args.clients))
        cpu["http"].append(meter.stop(began))
        rss.append(_rss_mb(args.server_pid))
        store_rates.append(per_run * args.size / store_batches(args.dsn, direct[run],
                                                               args.clients))
        errors += errs
        if accepted != per_run * args.size:
            errors += 1
        http_rates.append(per_run * args.size / http_s)
    return {"http_events_per_s": http_rates, "copy_events_per_s": copy_rates,
            "store_events_per_s": store_rates,
            "errors": errors, "batch_size": args.size, "batches_per_run": per_run,
            "clients": args.clients, "cpu_seconds": cpu, "api_rss_mb": rss}


async def open_loop(url: str, token: str, bodies: list[bytes], rate: float,
                    conns: int) -> tuple[list[float], list[float], Counter[str], list[float]]:
    """Send body i at t0 + i/rate whatever happened before (open loop). Latency counts from
    the scheduled time, so a stalled server cannot hide its queue (no coordinated omission).
    Returns (scheduled offsets, latencies in seconds, errors by status or exception, the
    scheduled offsets of the failed requests)."""
    free: asyncio.Queue[Conn] = asyncio.Queue()
    ready = [Conn(url, token) for _ in range(conns)]
    # Connected before the clock starts: the queue hands them out in turn, so connecting
    # lazily made the first `conns` requests of the run each open a connection at once.
    await asyncio.gather(*(c.connect() for c in ready))
    for conn in ready:
        free.put_nowait(conn)
    offsets = [i / rate for i in range(len(bodies))]
    latencies = [0.0] * len(bodies)
    errors: Counter[str] = Counter()
    failed_at: list[float] = []
    loop = asyncio.get_running_loop()
    tasks = []

    async def one(i: int, due: float) -> None:
        conn = await free.get()
        try:
            status, _ = await conn.post(bodies[i])
            if status != 202:
                errors[str(status)] += 1
                failed_at.append(offsets[i])
        except (OSError, asyncio.IncompleteReadError) as exc:
            errors[type(exc).__name__] += 1
            failed_at.append(offsets[i])
            conn = Conn(url, token)
        finally:
            free.put_nowait(conn)
        latencies[i] = loop.time() - due

    t0 = loop.time() + 0.05
    for i, off in enumerate(offsets):
        due = t0 + off
        delay = due - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i, due)))
    await asyncio.gather(*tasks)
    for conn in ready:
        if conn.writer is not None:
            conn.writer.close()
    return offsets, latencies, errors, failed_at


def cmd_open(args: argparse.Namespace) -> dict[str, Any]:
    template = template_events(5000)
    ids = Ids(args.seed)
    n = int(args.rate * args.seconds)
    it = itertools.cycle(template)
    bodies = [orjson.dumps({"events": [{**next(it), "event_id": ids()}]}) for _ in range(n)]
    warm = [orjson.dumps({"events": [{**next(it), "event_id": ids()}]}) for _ in range(200)]
    asyncio.run(open_loop(args.url, args.token, warm, min(args.rate, 200), args.conns))
    # The generator's own full GC passes (its heap holds every body and, by the end, every
    # finished task) stalled it for tens of milliseconds, then it sent what had fallen due
    # in one burst: no collection while the clock runs.
    gc.collect()
    gc.disable()
    t0 = time.perf_counter()
    offsets, lat, errors, failed_at = asyncio.run(
        open_loop(args.url, args.token, bodies, args.rate, args.conns))
    wall = time.perf_counter() - t0
    gc.enable()
    return {"offsets_s": [round(o, 4) for o in offsets],
            "latencies_ms": [round(x * 1000, 3) for x in lat],
            "errors": sum(errors.values()), "errors_by_kind": dict(errors),
            "error_offsets_s": [round(o, 3) for o in failed_at[:1000]], "wall_s": wall,
            "requests": n}


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("batch")
    b.add_argument("--dsn", required=True)
    b.add_argument("--clients", type=int, default=4)
    b.add_argument("--batches", type=int, default=40)
    b.add_argument("--size", type=int, default=1000)
    b.add_argument("--server-pid", type=int, default=None,
                   help="the API server's pid, to report the CPU it spends")
    b.add_argument("--runs", type=int, default=5)
    o = sub.add_parser("open")
    o.add_argument("--rate", type=float, default=1000)
    o.add_argument("--seconds", type=float, default=60)
    o.add_argument("--conns", type=int, default=64)
    for s in (b, o):
        s.add_argument("--url", required=True)
        s.add_argument("--token", required=True)
        s.add_argument("--seed", type=int, default=random.SystemRandom().randrange(1 << 30))
    args = p.parse_args()
    result = cmd_batch(args) if args.cmd == "batch" else cmd_open(args)
    sys.stdout.write(orjson.dumps(result).decode() + "\n")


if __name__ == "__main__":
    main()
