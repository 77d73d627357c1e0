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
from service.errors import EttError, Unavailable

COOKIE = "ett_session"
IDLE_S = 12 * 3600.0


@dataclass
class _Session:
    token: str
    last_seen: float


class Sessions:
    """The open sessions, bounded per token and as a whole.

    A token holds at most `per_token` sessions: signing in once more closes its least
    recently used one. The whole holds at most `max_sessions`; when full, a token with
    sessions of its own gives one of them up, and a token without any is refused (503)
    rather than closing another token's session: one token signing in ten thousand times
    cannot sign anyone else out.
    """

    def __init__(self, auth: Authenticator, *, max_sessions: int, per_token: int,
                 idle_s: float = IDLE_S) -> None:
        self._auth = auth
        self._idle_s = idle_s
        self.max_sessions = max_sessions
        self.per_token = per_token
        self._by_id: dict[str, _Session] = {}
        self._by_token: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    async def principal_for(self, token: str) -> Principal:
        """The token's principal, or the EttError that says why not (401, 503)."""
        header = f"Bearer {token}"
        principal = self._auth.resolve_now(header)
        if principal is not None:
            return principal
        return await run_in_threadpool(self._auth.resolve, header)

    def open(self, token: str) -> str:
        """A new session's id for `token`, or Unavailable when every place is another
        token's."""
        session_id = secrets.token_urlsafe(32)
        now = time.monotonic()
        with self._lock:
            self._expire(now)
            own = self._by_token.get(token, set())
            if len(own) >= self.per_token or (own and len(self._by_id) >= self.max_sessions):
                self._drop(min(own, key=lambda k: self._by_id[k].last_seen))
            elif len(self._by_id) >= self.max_sessions:
                raise Unavailable(f"the console holds its limit of {self.max_sessions} sessions"
                                  " (ETT_CONSOLE_MAX_SESSIONS); try again later",
                                  retry_after_s=60)
            self._by_id[session_id] = _Session(token, now)
            self._by_token.setdefault(token, set()).add(session_id)
        return session_id

    def count(self, token: str | None = None) -> int:
        with self._lock:
            return len(self._by_id) if token is None else len(self._by_token.get(token, ()))

    def _drop(self, session_id: str) -> None:
        session = self._by_id.pop(session_id, None)
        if session is None:
            return
        own = self._by_token[session.token]
        own.discard(session_id)
        if not own:
            del self._by_token[session.token]

    def close(self, session_id: str | None) -> None:
        with self._lock:
            self._drop(session_id or "")

    async def current(self, request: Request) -> Principal | None:
        """The signed-in principal, or None (no cookie, expired, unknown or revoked token)."""
        session_id = request.cookies.get(COOKIE)
        if not session_id:
            return None
        now = time.monotonic()
        with self._lock:
            session = self._by_id.get(session_id)
            if session is None or now - session.last_seen > self._idle_s:
                self._drop(session_id)
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
            self._drop(key)
