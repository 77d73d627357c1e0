"""One HTTP request per batch (``urllib``, standard library), and what to do with the answer.

The sender thread calls :func:`post_batch`; it never raises for network or HTTP trouble but
returns an :class:`Outcome` that says whether to retry, and how long the service asked us
to wait. Retried: connection errors and timeouts, 429, 500, 502, 503 and 504 (the request
may not have been processed; a duplicate is harmless because the service de-duplicates by
``event_id``). Not retried: other 4xx, which would fail the same way forever.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import random
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
USER_AGENT = "ett-client/0.1"


@dataclass(frozen=True)
class Outcome:
    status: int | None  # None: no HTTP answer (connection refused, timeout, reset...)
    retry: bool
    retry_after_s: float | None = None
    accepted: int = 0
    duplicates: int = 0
    rejected: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""
    # Events the service stored in their team's own job (another team wrote the id first).
    moved: list[dict[str, Any]] = field(default_factory=list)


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` as seconds: either delta-seconds or an HTTP date (RFC 9110 10.2.3)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    now = time.time() if now is None else now
    return max(0.0, when.timestamp() - now)


def backoff_s(retry: int, base_s: float, max_s: float, rng: random.Random) -> float:
    """Exponential backoff with full jitter: uniform in [0, d], d = min(max, base * 2**retry).

    A thousand trainers cut off by one restart come back spread over the whole interval,
    not bunched in its second half.
    """
    delay = min(max_s, base_s * (2 ** min(retry, 32)))
    return rng.uniform(0.0, delay)


def retry_delay_s(retry: int, retry_after_s: float | None, base_s: float, max_s: float,
                  retry_after_max_s: float, rng: random.Random) -> float:
    """How long to wait before try `retry + 1`: the backoff, after the service's
    `Retry-After` (capped at `retry_after_max_s`) when it sent one. The wait it asks for is
    the floor, and the jitter on top keeps the clients it told the same thing from coming
    back in step."""
    jitter = backoff_s(retry, base_s, max_s, rng)
    if retry_after_s is None:
        return jitter
    return min(retry_after_s, retry_after_max_s) + jitter


def build_body(lines: list[bytes]) -> bytes:
    """``{"events": [...]}`` from already-encoded JSON lines, without decoding them again."""
    return b'{"events":[' + b",".join(lines) + b"]}"


def post_batch(url: str, token: str | None, body: bytes, timeout_s: float) -> Outcome:
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            status = response.status
            payload = response.read()
    except urllib.error.HTTPError as exc:
        status = exc.code
        try:
            detail = exc.read()[:500].decode("utf-8", "replace")
        except (OSError, http.client.HTTPException):
            detail = ""
        retry_after = parse_retry_after(exc.headers.get("Retry-After") if exc.headers else None)
        return Outcome(status=status, retry=status in RETRYABLE_STATUS,
                       retry_after_s=retry_after, error=f"HTTP {status}: {detail}")
    except (TimeoutError, urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", exc)
        return Outcome(status=None, retry=True, error=f"{type(exc).__name__}: {reason}")
    if status not in (200, 201, 202):
        # A 1xx/3xx we did not ask for: the batch was probably not stored; try again.
        return Outcome(status=status, retry=True, error=f"unexpected HTTP {status}")
    try:
        answer = json.loads(payload or b"{}")
        accepted = int(answer.get("accepted", 0))
        duplicates = int(answer.get("duplicates", 0))
        rejected = list(answer.get("rejected") or [])
        moved = list(answer.get("moved") or [])
    except (ValueError, AttributeError, TypeError) as exc:
        # Stored (2xx) but unreadable: count everything as acknowledged, do not resend.
        return Outcome(status=status, retry=False, accepted=-1,
                       error=f"unreadable 2xx body: {exc}")
    return Outcome(status=status, retry=False, accepted=accepted, duplicates=duplicates,
                   rejected=rejected, moved=moved)
