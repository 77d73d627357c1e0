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
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import orjson

from .common import nearest_rank
from .loadgen import Conn


class Bodies:
    """Fresh events for one client's job: heartbeats with new random (version 4) ids,
    stamped now.

    The generator shares the machine's two cores with the servers it measures, so a body
    is formatted from a template rather than built as objects and serialised: a 10-event
    body took 46 us that way (`uuid.UUID` and `orjson.dumps` of ten dicts), about half the
    generator's CPU per request; the JSON is the same."""

    def __init__(self, job: str, events: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.job, self.events, self.step = job, events, 0
        self._event = ('{"event_id":"%s","ts":"%s","job_id":' + orjson.dumps(job).decode()
                       + ',"attempt":0,"model":"bench_model","type":"heartbeat",'
                       '"attrs":{"step":%d}}')

    def __call__(self) -> tuple[bytes, list[str]]:
        stamp = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        n = self.events
        ids = _uuid4s(f"{self.rng.getrandbits(128 * n):0{32 * n}x}", n)
        self.step += 1
        event, step = self._event, self.step
        body = '{"events":[' + ",".join([event % (i, stamp, step) for i in ids]) + "]}"
        return body.encode(), ids


# A random hex digit as a variant 1 (RFC 4122) digit: its two high bits 10.
_VARIANT = {f"{d:x}": "89ab"[d & 3] for d in range(16)}


def _uuid4s(bits: str, n: int) -> list[str]:
    """`n` version 4 UUIDs' text from 32 * n random hex digits (version and variant set)."""
    out = []
    for at in range(0, 32 * n, 32):
        h = bits[at:at + 32]
        out.append(f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:]}")
    return out


PARTS = ("connection", "generator", "exchange")


class Tally:
    def __init__(self, tokens: int, acks: bool) -> None:
        self.latencies: list[list[float]] = [[] for _ in range(tokens)]
        self.errors: Counter[str] = Counter()
        self.acked: list[str] | None = [] if acks else None
        self.ok = 0
        # Where an open loop's latency went (answered requests, per token): the wait for
        # one of the token's connections, the generator's own lateness in sending, and
        # the exchange itself (written to read).
        self.parts: list[dict[str, list[float]]] = [
            {part: [] for part in PARTS} for _ in range(tokens)]

    def answer(self, token: int, status: int | None, latency: float, ids: list[str],
               kind: str = "") -> None:
        if status == 202:
            self.ok += 1
            self.latencies[token].append(latency)
            if self.acked is not None:
                self.acked.extend(ids)
        else:
            self.errors[kind or str(status)] += 1

    def part(self, token: int, seconds: tuple[float, float, float]) -> None:
        for values, value in zip(self.parts[token].values(), seconds, strict=True):
            values.append(value)


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
    rate.

    Each of a token's connections takes the token's next due instant when it is free: a
    due instant in the future is waited for, one in the past has waited for a connection
    (and counts it). Every due request is sent, however late. One coroutine per connection,
    not one task per request: a token far over what the server admits left a task per due
    request waiting for a connection (a hundred thousand in a run), and creating them took
    the generator's CPU from the requests it was timing."""
    total = sum(weights)
    shares = rate_weights or weights
    tally = Tally(len(tokens), False)
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.05
    workers: list[tuple[int, Conn, Bodies]] = []
    for t, (token, weight) in enumerate(zip(tokens, weights, strict=True)):
        for _ in range(max(1, round(clients * weight / total))):
            conn = Conn(url, token)
            workers.append((t, conn, Bodies(f"{fleet}-{len(workers) + 1}", events,
                                            seed * 100_003 + len(workers) + 1)))
    await _connect_all([conn for _, conn, _ in workers])
    token_rates = [rate * share / sum(shares) for share in shares]
    counts = [int(r * seconds) for r in token_rates]
    taken = [0] * len(tokens)

    async def worker(t: int, conn: Conn, bodies: Bodies) -> None:
        while taken[t] < counts[t]:
            due = start + taken[t] / token_rates[t]
            taken[t] += 1
            free = loop.time()
            if due > free:
                await asyncio.sleep(due - free)
            body, ids = bodies()
            sent = loop.time()
            status, kind = await _post(conn, body)
            now = loop.time()
            tally.answer(t, status, now - due, ids, kind)
            if status == 202:
                tally.part(t, (max(0.0, free - due), sent - max(due, free), now - sent))

    began = time.perf_counter()
    await asyncio.gather(*(worker(*w) for w in workers))
    return _result(tally, time.perf_counter() - began, [conn for _, conn, _ in workers])


def _result(tally: Tally, wall: float, conns: list[Conn]) -> dict[str, Any]:
    for conn in conns:
        if conn.writer is not None:
            conn.writer.close()
    out: dict[str, Any] = {
        "wall_s": wall, "ok": tally.ok, "errors": dict(tally.errors),
        "latencies_ms": [[round(x * 1000, 2) for x in lat] for lat in tally.latencies],
        "cpu_s": time.process_time()}
    if any(parts["exchange"] for parts in tally.parts):
        out["parts_ms"] = _parts(tally.parts)
        out["parts_ms_by_token"] = [_parts([parts]) for parts in tally.parts]
    if tally.acked is not None:
        out["acked"] = tally.acked
    return out


def _parts(of: list[dict[str, list[float]]]) -> dict[str, dict[str, float]]:
    out = {}
    for name in PARTS:
        values = [v for parts in of for v in parts[name]]
        if values:
            out[name] = {"p50": _ms(nearest_rank(values, 0.5)),
                         "p99": _ms(nearest_rank(values, 0.99))}
    return out


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


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
