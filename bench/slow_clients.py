"""Slow clients: one writer token's stalled connections must not block other writers.

A real `ett serve --no-aggregator` with the in-flight limits of the round that added this
benchmark (128 requests, 32 per token; the defaults are larger now) and a 5 s body
deadline. One writer token opens 130 connections that send their
headers and a few bytes of body, then wait (what starved ingest before: every request got
503 while they stayed open). Meanwhile another token posts single events one after the
other; measured: their latency and status, and how the stalled requests ended (408 at the
deadline for the admitted ones, 503 at once beyond the token's share).
"""

from __future__ import annotations

import socket
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import httpx

from .common import ADMIN_TOKEN, Postgres, ett_serve, fmt, record, spread, writer_token

NAME = "slow_clients"
STALLED = 130
DEADLINE_S = 5.0


def _stall(port: int, secret: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall((f"POST /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {secret}\r\n"
                  "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
                  '{"events": [').encode())
    return sock


def _event() -> dict[str, Any]:
    return {"event_id": str(uuid.uuid4()),
            "ts": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            "job_id": "other-writer", "attempt": 0, "model": "search", "type": "heartbeat"}


def run(pg: Postgres, quick: bool) -> dict[str, Any]:
    url = pg.create_database("bench_slow")
    posts = 50 if quick else 300
    env = {"ETT_INGEST_BODY_DEADLINE_S": str(DEADLINE_S), "ETT_INGEST_MAX_IN_FLIGHT": "128",
           "ETT_INGEST_MAX_IN_FLIGHT_PER_TOKEN": "32"}
    with ett_serve(url, env=env) as srv:
        secret = writer_token(url, "ads", ("ads_*",))
        port = int(srv.url.rsplit(":", 1)[1])
        started = time.monotonic()
        socks = [_stall(port, secret) for _ in range(STALLED)]
        time.sleep(0.5)
        latencies, statuses = [], []
        with httpx.Client(headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) as client:
            for _ in range(posts):
                t0 = time.perf_counter()
                r = client.post(srv.url + "/v1/events", json={"events": [_event()]}, timeout=30)
                latencies.append((time.perf_counter() - t0) * 1000)
                statuses.append(r.status_code)
        ended: dict[str, int] = {}
        last_answer_s = 0.0
        for sock in socks:
            sock.settimeout(DEADLINE_S * 3)
            try:
                status = sock.recv(64).split(b" ", 2)[1].decode()
            except (OSError, IndexError):
                status = "none"
            last_answer_s = max(last_answer_s, time.monotonic() - started)
            ended[status] = ended.get(status, 0) + 1
            sock.close()
    pg.drop_database(url)
    lat = spread(latencies, 1)
    other_ok = statuses.count(202)
    print(f"{STALLED} stalled sockets of one token; another token's {posts} posts:"
          f" {other_ok} answered 202, latency {fmt(lat, ' ms')};"
          f" stalled requests ended {ended}, the last after {last_answer_s:.1f} s")
    figures = {"stalled_sockets": STALLED, "body_deadline_s": DEADLINE_S, "posts": posts,
               "other_202": other_ok, "other_latency_ms": lat, "stalled_ended": ended,
               "last_stalled_answer_s": round(last_answer_s, 2)}
    return record(NAME, quick, figures, [
        ("another token's posts all answered 202 while one token stalls 130 sockets",
         f"{other_ok}/{posts}", other_ok == posts),
        ("another token's post latency with 130 stalled sockets (plain figure)",
         fmt(lat, " ms"), None),
        ("stalled requests end within the body deadline (408) or at once (503)",
         f"{ended}, last after {last_answer_s:.1f} s",
         set(ended) <= {"408", "503"} and last_answer_s < DEADLINE_S * 2),
    ])
