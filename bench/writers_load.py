"""The load of `bench/small_writers.py`: many keep-alive clients, each one trainer (its own
job) posting small batches of fresh events, in a process of its own.

    python -m bench.writers_load closed --url URL --token T [--token T2 ...] --clients 1000
        --seconds 15 --events 1 [--acks]
    python -m bench.writers_load open ... --rate 4000 [--weight 10 --weight 1 ...]

`closed`: each client posts, waits for the answer, and posts again (the sustained rate).
`open`: requests are due at a fixed rate whatever the server does, split over the tokens by
weight; latency counts from the due instant, so a queue cannot hide (no coordinated
omission). With `--acks` the ids of every acknowledged event are printed (the kill -9
count). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import sys
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import orjson

from .loadgen import Conn


class Bodies:
    """Fresh events for one client's job: heartbeats with new ids, stamped now."""

    def __init__(self, job: str, events: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.job, self.events, self.step = job, events, 0

    def __call__(self) -> tuple[bytes, list[str]]:
        stamp = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        ids = [str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
               for _ in range(self.events)]
        self.step += 1
        body = orjson.dumps({"events": [
            {"event_id": i, "ts": stamp, "job_id": self.job, "attempt": 0,
             "model": "bench_model", "type": "heartbeat", "attrs": {"step": self.step}}
            for i in ids]})
        return body, ids


class Tally:
    def __init__(self, tokens: int, acks: bool) -> None:
        self.latencies: list[list[float]] = [[] for _ in range(tokens)]
        self.errors: Counter[str] = Counter()
        self.acked: list[str] | None = [] if acks else None
        self.ok = 0
        # Where an open loop's latency went (answered requests): the generator's own
        # lateness in starting the request, the wait for one of the token's connections,
        # and the exchange itself (written to read).
        self.parts: dict[str, list[float]] = {"generator": [], "connection": [],
                                              "exchange": []}

    def answer(self, token: int, status: int | None, latency: float, ids: list[str],
               kind: str = "") -> None:
        if status == 202:
            self.ok += 1
            self.latencies[token].append(latency)
            if self.acked is not None:
                self.acked.extend(ids)
        else:
            self.errors[kind or str(status)] += 1


async def _post(conn: Conn, body: bytes) -> tuple[int | None, str]:
    try:
        status, _ = await conn.post(body)
        return status, ""
    except (OSError, asyncio.IncompleteReadError) as exc:
        if conn.writer is not None:
            conn.writer.close()
        conn.writer = conn.reader = None
        return None, type(exc).__name__


async def _connect_all(conns: list[Conn]) -> None:
    for at in range(0, len(conns), 100):  # not a thousand SYNs at once
        await asyncio.gather(*(c.connect() for c in conns[at:at + 100]))


async def closed(url: str, tokens: list[str], clients: int, seconds: float, events: int,
                 acks: bool, seed: int, fleet: str) -> dict[str, Any]:
    conns = [Conn(url, tokens[i % len(tokens)]) for i in range(clients)]
    await _connect_all(conns)
    tally = Tally(len(tokens), acks)
    loop = asyncio.get_running_loop()
    stop = loop.time() + seconds

    async def client(i: int) -> None:
        bodies = Bodies(f"{fleet}-{i}", events, seed * 100_003 + i)
        conn = conns[i]
        while loop.time() < stop:
            body, ids = bodies()
            began = loop.time()
            status, kind = await _post(conn, body)
            tally.answer(i % len(tokens), status, loop.time() - began, ids, kind)
            if status is None:
                await asyncio.sleep(0.05)  # the server is away: do not spin

    began = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    return _result(tally, time.perf_counter() - began, conns)


async def open_loop(url: str, tokens: list[str], weights: list[float], clients: int,
                    rate: float, seconds: float, events: int, seed: int, fleet: str,
                    rate_weights: list[float] | None = None) -> dict[str, Any]:
    """`weights` split the clients over the tokens; `rate_weights` (else the same) the
    rate."""
    total = sum(weights)
    shares = rate_weights or weights
    tally = Tally(len(tokens), False)
    loop = asyncio.get_running_loop()
    groups: list[asyncio.Queue[tuple[Conn, Bodies]]] = []
    conns: list[Conn] = []
    for token, weight in zip(tokens, weights, strict=True):
        free: asyncio.Queue[tuple[Conn, Bodies]] = asyncio.Queue()
        for _ in range(max(1, round(clients * weight / total))):
            conn = Conn(url, token)
            conns.append(conn)
            free.put_nowait((conn, Bodies(f"{fleet}-{len(conns)}", events,
                                          seed * 100_003 + len(conns))))
        groups.append(free)
    await _connect_all(conns)
    # Only the requests still in flight: gathering every task of a run at its end held
    # the generator's loop ~100 ms, and its last answers with it.
    in_flight: set[asyncio.Task[None]] = set()

    async def one(t: int, due: float) -> None:
        started = loop.time()
        conn, bodies = await groups[t].get()
        try:
            body, ids = bodies()
            sent = loop.time()
            status, kind = await _post(conn, body)
        finally:
            groups[t].put_nowait((conn, bodies))
        now = loop.time()
        tally.answer(t, status, now - due, ids, kind)
        if status == 202:
            for part, seconds in zip(tally.parts.values(),
                                     (started - due, sent - started, now - sent), strict=True):
                part.append(seconds)

    async def schedule(t: int) -> None:
        token_rate = rate * shares[t] / sum(shares)
        start = loop.time() + 0.05
        for i in range(int(token_rate * seconds)):
            due = start + i / token_rate
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(one(t, due))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)

    began = time.perf_counter()
    await asyncio.gather(*(schedule(t) for t in range(len(tokens))))
    await asyncio.gather(*in_flight)
    return _result(tally, time.perf_counter() - began, conns)


def _result(tally: Tally, wall: float, conns: list[Conn]) -> dict[str, Any]:
    for conn in conns:
        if conn.writer is not None:
            conn.writer.close()
    out: dict[str, Any] = {
        "wall_s": wall, "ok": tally.ok, "errors": dict(tally.errors),
        "latencies_ms": [[round(x * 1000, 2) for x in lat] for lat in tally.latencies],
        "cpu_s": time.process_time()}
    if tally.parts["exchange"]:
        out["parts_ms"] = {name: {"p50": _quantile(values, 0.5), "p99": _quantile(values, 0.99)}
                           for name, values in tally.parts.items()}
    if tally.acked is not None:
        out["acked"] = tally.acked
    return out


def _quantile(seconds: list[float], q: float) -> float:
    ordered = sorted(seconds)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000, 2)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=("closed", "open"))
    p.add_argument("--url", required=True)
    p.add_argument("--token", action="append", required=True)
    p.add_argument("--weight", action="append", type=float)
    p.add_argument("--rate-weight", action="append", type=float)
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--seconds", type=float, default=15)
    p.add_argument("--events", type=int, default=1)
    p.add_argument("--rate", type=float, default=1000)
    p.add_argument("--acks", action="store_true")
    p.add_argument("--fleet", default="writer",
                   help="job names are FLEET-<client>: the same fleet's jobs are claimed once")
    p.add_argument("--seed", type=int, default=random.SystemRandom().randrange(1 << 20))
    args = p.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    gc.disable()  # its pauses would be the generator's, not the server's
    if args.mode == "closed":
        result = asyncio.run(closed(args.url, args.token, args.clients, args.seconds,
                                    args.events, args.acks, args.seed, args.fleet))
    else:
        weights = args.weight or [1.0] * len(args.token)
        result = asyncio.run(open_loop(args.url, args.token, weights, args.clients,
                                       args.rate, args.seconds, args.events, args.seed,
                                       args.fleet, args.rate_weight))
    line = orjson.dumps(result)
    path = os.environ.get("BENCH_RESULT_FILE")  # bench.common.run_json reads it there
    if path:
        with open(path, "wb") as fh:
            fh.write(line)
    else:
        sys.stdout.write(line.decode() + "\n")


if __name__ == "__main__":
    main()
