"""Reading a request body safely: one function for every endpoint that takes a body
(`POST /v1/events`, the OTLP receiver).

- **Deadline.** The whole body must arrive within `deadline_s` of the first read (408):
  a client that sends headers and then trickles or stalls holds its admission slot for at
  most that long, never for as long as it keeps the socket open. The ingest routes keep
  theirs by `service.wire.deadlines` (to within 50 ms; a timer per request cost a tenth
  of a small request's CPU), the others by `asyncio.timeout`.
- **Size.** `limit` bytes at most, against `Content-Length` before reading and while
  reading chunked bodies (413); a compressed body's *decompressed* size is held to the same
  limit, so a small bomb is refused as soon as its output passes it.
- **Media type.** `Content-Type` must be one of `media_types` (parameters such as
  `charset=utf-8` allowed) or absent (415).
- **Encoding.** `Content-Encoding` `gzip`, `x-gzip` or `deflate` (zlib), or none; any
  other is 415 rather than a misleading "not valid JSON".
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Awaitable, Callable, Iterable
from functools import lru_cache
from typing import Any

import orjson
from starlette.requests import ClientDisconnect, Request

from service.errors import BadRequest, PayloadTooLarge, RequestTimeout, UnsupportedMediaType

from .deadlines import BodyDeadlines

Receive = Callable[[], Awaitable[Any]]  # an ASGI `receive`
ENCODINGS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS,
             "deflate": zlib.MAX_WBITS}


def check_media_type(content_type: str | None, media_types: Iterable[str]) -> None:
    if content_type is None:
        return  # curl and older clients omit it; the body is still parsed strictly
    refusal = _media_refusal(content_type, tuple(media_types))
    if refusal is not None:
        raise UnsupportedMediaType(refusal)


@lru_cache(maxsize=256)
def _media_refusal(content_type: str, allowed: tuple[str, ...]) -> str | None:
    # Cached: a fleet sends one or two spellings of its Content-Type all day.
    media = content_type.split(";", 1)[0].strip().lower()
    if media in allowed:
        return None
    return f"Content-Type {media!r} is not accepted here; send {' or '.join(allowed)}"


def _decompressor(encoding: str | None) -> zlib._Decompress | None:  # type: ignore[name-defined]
    if encoding is None:
        return None
    name = (encoding or "identity").strip().lower()
    if name == "identity":
        return None
    if name not in ENCODINGS:
        raise UnsupportedMediaType(
            f"Content-Encoding {name!r} is not supported; send gzip, deflate or none")
    return zlib.decompressobj(ENCODINGS[name])


class _Body:
    """A body as it arrives: each chunk counted, charged, inflated and held to the limit."""

    __slots__ = ("charge", "data", "inflate", "limit", "received")

    def __init__(self, headers: Iterable[tuple[bytes, bytes]], limit: int,
                 media_types: Iterable[str], charge: Callable[[int], None] | None) -> None:
        # One pass over the raw headers: each `Headers.get` scans them all again.
        content_type = encoding = declared = None
        for name, value in headers:
            # The first of each, as Headers.get.
            if name == b"content-length":
                if declared is None:
                    declared = value.decode("latin-1")
            elif name == b"content-type":
                if content_type is None:
                    content_type = value.decode("latin-1")
            elif name == b"content-encoding" and encoding is None:
                encoding = value.decode("latin-1")
        check_media_type(content_type, media_types)
        self.inflate = _decompressor(encoding)
        if declared is not None:
            try:
                declared_n = int(declared)
            except ValueError:
                raise BadRequest("Content-Length header is not a number") from None
            if declared_n > limit:
                raise PayloadTooLarge(
                    f"body of {declared_n} bytes exceeds the limit of {limit} bytes")
        self.data = bytearray()
        self.received = 0
        self.limit = limit
        self.charge = charge

    def take(self, chunk: bytes) -> None:
        self.received += len(chunk)
        if self.received > self.limit:
            raise PayloadTooLarge(f"body exceeds the limit of {self.limit} bytes")
        if self.charge is not None:
            self.charge(len(chunk))
        if self.inflate is None:
            self.data += chunk
        else:
            _inflate_into(self.data, self.inflate, chunk, self.limit)

    async def receive_all(self, receive: Receive) -> None:
        """Every chunk until the last (as Starlette's `Request.stream` reads them)."""
        while True:
            message = await receive()
            kind = message["type"]
            if kind == "http.request":
                chunk = message.get("body", b"")
                if chunk:
                    self.take(chunk)
                if not message.get("more_body", False):
                    return
            elif kind == "http.disconnect":
                raise ClientDisconnect()

    def done(self) -> bytearray:
        if self.inflate is not None and not self.inflate.eof:
            raise BadRequest("body: the compressed stream is truncated")
        return self.data

    def timeout(self, deadline_s: float) -> RequestTimeout:
        return RequestTimeout(f"the body did not arrive within {deadline_s:g} s"
                              f" ({self.received} bytes received)")


async def read_body(request: Request, *, limit: int, deadline_s: float,
                    media_types: Iterable[str] = ("application/json",),
                    charge: Callable[[int], None] | None = None) -> bytearray:
    """The request's body, decoded, refused as early as it breaks a rule.

    `charge(n)` is called with each chunk's size as it arrives (an in-flight byte budget);
    the buffer grows in place, never joined into a second copy.
    """
    body = _Body(request.scope["headers"], limit, media_types, charge)
    try:
        async with asyncio.timeout(deadline_s):
            await body.receive_all(request.receive)
    except TimeoutError:
        raise body.timeout(deadline_s) from None
    return body.done()


async def receive_body(headers: Iterable[tuple[bytes, bytes]], receive: Receive, *,
                       limit: int, deadlines: BodyDeadlines,
                       media_types: Iterable[str] = ("application/json",),
                       charge: Callable[[int], None] | None = None) -> bytearray:
    """`read_body` of a raw ASGI request (its headers and `receive`), under one of
    `deadlines` instead of a timer of its own (the ingest routes' way: see
    `service.wire.deadlines`)."""
    body = _Body(headers, limit, media_types, charge)
    task = deadlines.start()
    try:
        await body.receive_all(receive)
    except asyncio.CancelledError:
        if deadlines.expired(task):
            raise body.timeout(deadlines.seconds) from None
        raise
    finally:
        deadlines.end(task)
    return body.done()


def _inflate_into(body: bytearray, inflate: zlib._Decompress,  # type: ignore[name-defined]
                  chunk: bytes, limit: int) -> None:
    try:
        # At most one byte past the limit is produced: enough to know it was passed.
        body += inflate.decompress(chunk, limit + 1 - len(body))
        if len(body) > limit or inflate.unconsumed_tail:
            raise PayloadTooLarge(f"decompressed body exceeds the limit of {limit} bytes")
    except zlib.error as exc:
        raise BadRequest(f"body: not a valid compressed stream ({exc})") from None


def json_object(body: bytes | bytearray, shape: str) -> dict:
    """The body parsed as one JSON object, or 400 naming what is wrong (`shape`: what the
    endpoint expects, for the message)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise BadRequest(f"body must be a JSON object {shape}")
    return doc
