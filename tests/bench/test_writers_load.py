"""The small-writers load generator's open loop: latency counts from the due instant, and
its parts say where it went.

The server here is the generator's counterpart for this test only: it answers every
request 202 after a fixed delay, so the figures have known lower bounds."""

from __future__ import annotations

import asyncio

from bench.writers_load import open_loop

DELAY_S = 0.02
ANSWER = b"HTTP/1.1 202 Accepted\r\nContent-Length: 2\r\n\r\n{}"


async def _slow_server() -> tuple[asyncio.Server, str]:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                await reader.readexactly(length)
                await asyncio.sleep(DELAY_S)
                writer.write(ANSWER)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


def _run(clients: int, rate: float, seconds: float, tokens: int = 1,
         rates: list[float] | None = None) -> dict:
    async def go() -> dict:
        server, url = await _slow_server()
        async with server:
            return await open_loop(url, [f"t{i}" for i in range(tokens)], [1.0] * tokens,
                                   clients, rate, seconds, 1, seed=1, fleet="f",
                                   rate_weights=rates)
    return asyncio.run(go())


def test_every_request_is_answered_and_the_exchange_holds_the_servers_delay() -> None:
    out = _run(clients=20, rate=200, seconds=0.5)
    assert out["ok"] == 100 and out["errors"] == {}
    assert len(out["latencies_ms"][0]) == 100
    parts = out["parts_ms"]
    assert set(parts) == {"generator", "connection", "exchange"}
    assert parts["exchange"]["p50"] >= DELAY_S * 1000 - 1  # the loop's clock is in ms
    assert min(out["latencies_ms"][0]) >= DELAY_S * 1000 - 1


def test_a_busy_connection_is_waited_for_and_counted() -> None:
    # One connection, a request due every 10 ms, each answered after 20 ms: requests queue
    # for the connection, and their latency, counted from the due instant, says so.
    out = _run(clients=1, rate=100, seconds=0.3)
    assert out["ok"] == 30
    assert out["parts_ms"]["connection"]["p99"] >= 200  # the last waits for ~14 before it
    assert max(out["latencies_ms"][0]) >= 250


def test_each_tokens_parts_are_its_own() -> None:
    # One connection each: the first token's requests are due every 10 ms and queue for
    # its connection; the second's every 50 ms, each sent when due.
    out = _run(clients=2, rate=120, seconds=0.3, tokens=2, rates=[5.0, 1.0])
    assert out["ok"] == 36 and [len(lat) for lat in out["latencies_ms"]] == [30, 6]
    hog, other = out["parts_ms_by_token"]
    assert hog["connection"]["p99"] >= 200
    assert other["connection"]["p99"] == 0
    assert max(out["latencies_ms"][1]) < 200


def test_bodies_are_fresh_heartbeats_with_random_version_4_ids() -> None:
    import uuid

    import orjson

    from bench.writers_load import Bodies

    bodies = Bodies('job-"1"', 10, seed=7)
    seen: set[str] = set()
    for step in (1, 2, 3):
        body, ids = bodies()
        events = orjson.loads(body)["events"]
        assert [e["event_id"] for e in events] == ids and len(set(ids)) == 10
        for e in events:
            parsed = uuid.UUID(e["event_id"])
            assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
            assert str(parsed) == e["event_id"]
            assert (e["job_id"], e["type"], e["attrs"]) == ('job-"1"', "heartbeat",
                                                            {"step": step})
            assert e["ts"].endswith("Z")
        seen.update(ids)
    assert len(seen) == 30
