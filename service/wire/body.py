"""Reading a request body safely: one function for every endpoint that takes a body
(`POST /v1/events`, the OTLP receiver).

- **Deadline.** The whole body must arrive within `deadline_s` of the first read (408):
  a client that sends headers and then trickles or stalls holds its admission slot for at
  most that long, never for as long as it keeps the socket open.
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
from collections.abc import Callable, Iterable

import orjson
from starlette.requests import Request

from service.errors import BadRequest, PayloadTooLarge, RequestTimeout, UnsupportedMediaType

_BODY_HEADERS = (b"content-type", b"content-encoding", b"content-length")
ENCODINGS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS,
             "deflate": zlib.MAX_WBITS}


def check_media_type(content_type: str | None, media_types: Iterable[str]) -> None:
    if content_type is None:
        return  # curl and older clients omit it; the body is still parsed strictly
    media = content_type.split(";", 1)[0].strip().lower()
    allowed = tuple(media_types)
    if media not in allowed:
        raise UnsupportedMediaType(
            f"Content-Type {media!r} is not accepted here; send {' or '.join(allowed)}")


def _decompressor(encoding: str | None) -> zlib._Decompress | None:  # type: ignore[name-defined]
    name = (encoding or "identity").strip().lower()
    if name == "identity":
        return None
    if name not in ENCODINGS:
        raise UnsupportedMediaType(
            f"Content-Encoding {name!r} is not supported; send gzip, deflate or none")
    return zlib.decompressobj(ENCODINGS[name])


async def read_body(request: Request, *, limit: int, deadline_s: float,
                    media_types: Iterable[str] = ("application/json",),
                    charge: Callable[[int], None] | None = None) -> bytearray:
    """The request's body, decoded, refused as early as it breaks a rule.

    `charge(n)` is called with each chunk's size as it arrives (an in-flight byte budget);
    the buffer grows in place, never joined into a second copy.
    """
    # One pass over the raw headers: each `request.headers.get` scans them all again.
    wanted: dict[bytes, str | None] = dict.fromkeys(_BODY_HEADERS)
    for name, value in request.scope["headers"]:
        if name in wanted and wanted[name] is None:  # the first one, as Headers.get
            wanted[name] = value.decode("latin-1")
    check_media_type(wanted[b"content-type"], media_types)
    inflate = _decompressor(wanted[b"content-encoding"])
    declared = wanted[b"content-length"]
    if declared is not None:
        try:
            declared_n = int(declared)
        except ValueError:
            raise BadRequest("Content-Length header is not a number") from None
        if declared_n > limit:
            raise PayloadTooLarge(f"body of {declared_n} bytes exceeds the limit of {limit} bytes")
    body = bytearray()
    received = 0
    try:
        async with asyncio.timeout(deadline_s):
            async for chunk in request.stream():
                received += len(chunk)
                if received > limit:
                    raise PayloadTooLarge(f"body exceeds the limit of {limit} bytes")
                if charge is not None:
                    charge(len(chunk))
                if inflate is None:
                    body += chunk
                else:
                    _inflate_into(body, inflate, chunk, limit)
    except TimeoutError:
        raise RequestTimeout(
            f"the body did not arrive within {deadline_s:g} s ({received} bytes received)"
        ) from None
    if inflate is not None and not inflate.eof:
        raise BadRequest("body: the compressed stream is truncated")
    return body


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
