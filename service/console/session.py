"""Console sign-in: a cookie that names a server-side session holding the token.

The cookie carries only a random session id (HttpOnly, SameSite=Strict, so neither page
scripts nor other sites can use it); the token stays in this process. Every request
authenticates the session's token again through the same `Authenticator` as the API, so
a revoked token's session stops working as soon as the token store's cache forgets it
(`ETT_TOKEN_CACHE_TTL_S`). Sessions live in memory: a restart signs everyone out, and
behind several replicas the console needs sticky sessions (the API does not).
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from service.access.auth import Authenticator, Principal
from service.errors import EttError

COOKIE = "ett_session"
IDLE_S = 12 * 3600.0
MAX_SESSIONS = 10_000


@dataclass
class _Session:
    token: str
    last_seen: float


class Sessions:
    def __init__(self, auth: Authenticator, idle_s: float = IDLE_S) -> None:
        self._auth = auth
        self._idle_s = idle_s
        self._by_id: dict[str, _Session] = {}
        self._lock = threading.Lock()

    async def principal_for(self, token: str) -> Principal:
        """The token's principal, or the EttError that says why not (401, 503)."""
        header = f"Bearer {token}"
        principal = self._auth.resolve_now(header)
        if principal is not None:
            return principal
        return await run_in_threadpool(self._auth.resolve, header)

    def open(self, token: str) -> str:
        session_id = secrets.token_urlsafe(32)
        now = time.monotonic()
        with self._lock:
            self._expire(now)
            if len(self._by_id) >= MAX_SESSIONS:
                # The oldest idle session goes first; memory stays bounded.
                oldest = min(self._by_id, key=lambda k: self._by_id[k].last_seen)
                del self._by_id[oldest]
            self._by_id[session_id] = _Session(token, now)
        return session_id

    def close(self, session_id: str | None) -> None:
        with self._lock:
            self._by_id.pop(session_id or "", None)

    async def current(self, request: Request) -> Principal | None:
        """The signed-in principal, or None (no cookie, expired, unknown or revoked token)."""
        session_id = request.cookies.get(COOKIE)
        if not session_id:
            return None
        now = time.monotonic()
        with self._lock:
            session = self._by_id.get(session_id)
            if session is None or now - session.last_seen > self._idle_s:
                self._by_id.pop(session_id, None)
                return None
            session.last_seen = now
            token = session.token
        try:
            principal = await self.principal_for(token)
        except EttError as exc:
            if exc.status_code == 401:
                self.close(session_id)
                return None
            raise
        return principal if principal.may_read() else None

    def _expire(self, now: float) -> None:
        stale = [k for k, s in self._by_id.items() if now - s.last_seen > self._idle_s]
        for key in stale:
            del self._by_id[key]
