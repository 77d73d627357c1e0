"""The shared body reader: Content-Type, Content-Encoding with a decompressed-size limit,
and the body deadline."""

from __future__ import annotations

import gzip
import socket
import time
import zlib

import orjson
import pytest

from tests.access.access_helpers import token
from tests.factories import event


def batch(n: int = 1) -> bytes:
    return orjson.dumps({"events": [event("heartbeat", i, job_id="body") for i in range(n)]})


@pytest.mark.parametrize(("encoding", "encode"), [
    ("gzip", gzip.compress), ("x-gzip", gzip.compress), ("deflate", zlib.compress),
    ("GZIP", gzip.compress), ("identity", lambda b: b),
])
def test_compressed_bodies_are_accepted(api, encoding: str, encode) -> None:
    r = api.post("/v1/events", content=encode(batch(3)),
                 headers={"Content-Type": "application/json", "Content-Encoding": encoding})
    assert r.status_code == 202 and r.json()["accepted"] == 3, r.text


def test_an_unknown_encoding_is_415_not_a_misleading_json_error(api) -> None:
    r = api.post("/v1/events", content=b"\x28\xb5\x2f\xfd...",
                 headers={"Content-Type": "application/json", "Content-Encoding": "zstd"})
    assert r.status_code == 415
    assert "Content-Encoding 'zstd' is not supported" in r.json()["detail"]


@pytest.mark.parametrize("media", ["text/plain", "application/x-www-form-urlencoded",
                                   "multipart/form-data; boundary=x"])
def test_another_content_type_is_415(api, media: str) -> None:
    r = api.post("/v1/events", content=batch(), headers={"Content-Type": media})
    assert r.status_code == 415 and "is not accepted here" in r.json()["detail"]


def test_json_with_parameters_or_no_content_type_is_read(api) -> None:
    r = api.post("/v1/events", content=batch(),
                 headers={"Content-Type": "Application/JSON; charset=utf-8"})
    assert r.status_code == 202, r.text
    r = api.post("/v1/events", content=batch(2))
    assert r.status_code == 202, r.text


def test_a_gzip_bomb_is_refused_at_the_decompressed_limit(api, db_engine) -> None:
    # 64 MiB of zeros compress to ~64 KiB: inside the 5 MiB body limit as sent.
    bomb = gzip.compress(b" " * (64 * 1024 * 1024), compresslevel=9)
    assert len(bomb) < 5 * 1024 * 1024
    r = api.post("/v1/events", content=bomb,
                 headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})
    assert r.status_code == 413
    assert "decompressed body exceeds the limit of 5242880 bytes" in r.json()["detail"]


@pytest.mark.parametrize("body", [b"not gzip at all", gzip.compress(batch(5))[:40]],
                         ids=["not gzip", "truncated gzip"])
def test_a_broken_or_truncated_stream_is_400(api, body: bytes) -> None:
    r = api.post("/v1/events", content=body,
                 headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})
    assert r.status_code == 400 and "compressed stream" in r.json()["detail"]


def _stalled_post(port: int, secret: str, declared: int = 10_000) -> socket.socket:
    """Headers and a few bytes of a body, then nothing: what a stalled client sends."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall((f"POST /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {secret}\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {declared}\r\n\r\n"
                  '{"events": [').encode())
    return sock


@pytest.mark.slow
def test_stalled_sockets_of_one_token_never_block_other_writers(service_factory,
                                                                pg_server_url) -> None:
    """With real sockets: 40 stalled bodies of one writer token against a real
    `ett serve` (in-flight limit 16, a token's share 4, body deadline 3 s). Other tokens
    are admitted at once; the stalled requests end in 408 at the deadline."""
    import httpx

    svc = service_factory(extra_env={
        "ETT_INGEST_MAX_IN_FLIGHT": "16", "ETT_INGEST_MAX_IN_FLIGHT_PER_TOKEN": "4",
        "ETT_INGEST_BODY_DEADLINE_S": "3"})
    from sqlalchemy import create_engine

    engine = create_engine(svc.database_url.replace("postgresql://", "postgresql+psycopg://")
                           if svc.database_url.startswith("postgresql://")
                           else svc.database_url)
    hostile = token(engine, "writer", "ads", ("ads_*",))
    other = token(engine, "writer", "search", ("search*",))
    engine.dispose()
    secret = hostile["Authorization"].removeprefix("Bearer ")
    socks = [_stalled_post(svc.port, secret) for _ in range(40)]
    try:
        time.sleep(0.5)  # all 40 have sent their headers
        for headers in (svc.headers(), {"Authorization": other["Authorization"]}):
            started = time.monotonic()
            r = httpx.post(svc.url + "/v1/events", headers=headers, timeout=10,
                           json={"events": [event("heartbeat", 1, model="search_x",
                                                  job_id=f"j-{time.monotonic_ns()}")]})
            waited = time.monotonic() - started
            print(f"other writer admitted in {waited * 1000:.1f} ms with 40 stalled sockets")
            assert r.status_code == 202, r.text
            assert waited < 2.5  # not behind the stalled bodies' 3 s deadline
        answers = []
        for sock in socks:
            sock.settimeout(10)
            answers.append(sock.recv(200).split(b" ", 2)[1])
        # 4 admitted and timed out at the deadline; the other 36 refused at once.
        assert answers.count(b"408") == 4 and answers.count(b"503") == 36, answers
    finally:
        for sock in socks:
            sock.close()
