"""Bearer-token authentication and the per-request principal.

Roles (docs/security.md): `admin` may do everything; `writer` may post events for models
that match its patterns (and claim only its own team for them) and read; `reader` may only
read; `adapter` (a scheduler adapter such as `ett slurm`) may post only scheduler events
(attrs.source = "scheduler"), for any model, and read. docs/model.md section 7: any valid
token may read, so read scope is not narrowed by patterns.

Tokens other than the bootstrap admin token (ETT_ADMIN_TOKEN) live in the token store
(`service.access.tokens`), which may have to ask the database. The routes' caller
dependencies (`service.access.callers`) call `authenticate()` from the event loop, so
`PreAuthMiddleware` resolves the header once per request first and leaves the answer where
`authenticate()` finds it. The bootstrap admin token and tokens in
the store's cache are answered on the loop (no database, no thread); only a cache miss asks
the database, in a worker thread: a slow or absent database never blocks the loop, and
shows as 503 (retry), never as 401 (drop).
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from starlette.concurrency import run_in_threadpool

from service.errors import EttError, Forbidden, Unauthorized

ROLES = ("admin", "writer", "reader", "adapter")


@dataclass(frozen=True)
class Principal:
    role: str
    token_id: str
    team: str | None = None
    model_patterns: tuple[str, ...] = field(default_factory=tuple)
    # What validation decided for this token's events by (model, team sent, scheduler or
    # not, the model's configured owner): each answer depends on those and on the fields
    # above only, and a token's events repeat them all day (`service.wire.batch`).
    verdicts: dict[tuple[str, str | None, bool, str | None], tuple[str | None, str | None]] = (
        field(default_factory=dict, compare=False, repr=False))

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    def may_write(self, model: str) -> bool:
        if self.role == "admin":
            return True
        if self.role != "writer":
            return False
        return any(fnmatchcase(model, pattern) for pattern in self.model_patterns)

    def may_write_scheduler(self, model: str) -> bool:
        """Scheduler events (attrs.source = "scheduler"): an adapter's, for any model."""
        return self.role in ("admin", "adapter")

    @property
    def default_team(self) -> str | None:
        """A writer token made with a team gives it to the events that name none."""
        return self.team if self.role == "writer" else None

    def may_read(self) -> bool:
        return self.role in ROLES

    def team_claim_error(self, model: str, team: str | None,
                         configured_owner: str | None) -> str | None:
        """Why this token may not label `model` with `team`, or None when it may.

        The owner is the taxonomy's model -> team mapping when it has the model, else the
        writer token's team; with neither, any team may be claimed (first one seen wins).
        """
        if self.role in ("admin", "adapter") or team is None:
            return None
        owner = configured_owner or self.team
        if owner is None or team == owner:
            return None
        source = "the configured owner" if configured_owner else "this token's team"
        return (f"team: this token may not claim team {team!r} for model {model!r}"
                f" ({source} is {owner!r})")


def bearer_token(header: str | None) -> str:
    if not header:
        raise Unauthorized("missing Authorization header; send 'Authorization: Bearer <token>'")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("Authorization header must be 'Bearer <token>'")
    return token.strip()


# A lookup for tokens other than the bootstrap admin token (the token store plugs in here).
# It returns None for an unknown or revoked token and raises Unavailable when it cannot tell.
TokenLookup = Callable[[str], Principal | None]
# The same answer when it needs no database (a cached valid token), else None: never blocks.
TokenPeek = Callable[[str], Principal | None]

_ENV_ADMIN = Principal(role="admin", token_id="env-admin")

# The header this request's answer belongs to, and the answer (a principal or the error).
_RESOLVED: ContextVar[tuple[str, Principal | EttError] | None] = ContextVar(
    "ett_resolved_principal", default=None
)


class Authenticator:
    def __init__(self, admin_token: str | None, lookup: TokenLookup | None = None,
                 peek: TokenPeek | None = None) -> None:
        self._admin_token = admin_token
        self._admin = admin_token.encode() if admin_token else None
        self._lookup = lookup
        self._peek = peek
        # Lookups under way on the event loop, by header: the requests of one token that
        # find its entry expired together (a fleet's connections after a quiet spell) wait
        # for one worker thread's answer instead of taking a thread each.
        self._resolving: dict[str, asyncio.Future[Principal]] = {}

    @property
    def has_lookup(self) -> bool:
        return self._lookup is not None

    def with_lookup(self, lookup: TokenLookup, peek: TokenPeek | None = None) -> Authenticator:
        return Authenticator(self._admin_token, lookup, peek)

    def resolve_now(self, header: str | None) -> Principal | None:
        """`resolve()`'s answer when it needs no database, else None; never blocks."""
        token = bearer_token(header)
        if self._admin is not None and hmac.compare_digest(token.encode(), self._admin):
            return _ENV_ADMIN
        if self._lookup is None:
            raise Unauthorized("invalid or revoked token")
        return self._peek(token) if self._peek is not None else None

    def resolve(self, header: str | None) -> Principal:
        """Authenticate from scratch; may block on the token store (call it off the loop)."""
        token = bearer_token(header)
        if self._admin is not None and hmac.compare_digest(token.encode(), self._admin):
            return _ENV_ADMIN
        if self._lookup is not None:
            principal = self._lookup(token)
            if principal is not None:
                return principal
        raise Unauthorized("invalid or revoked token")

    def authenticate(self, header: str | None) -> Principal:
        resolved = _RESOLVED.get()
        if resolved is not None and resolved[0] == header:
            answer = resolved[1]
            if isinstance(answer, EttError):
                raise answer
            return answer
        return self.resolve(header)

    async def resolve_on_loop(self, header: str | None) -> Principal:
        """`resolve()` from the event loop: answered there when it needs no database, else
        in a worker thread (a slow database never blocks the loop)."""
        principal = self.resolve_now(header)
        if principal is not None:
            return principal
        assert header is not None  # resolve_now refused a missing one
        shared = self._resolving.get(header)
        if shared is None or shared.get_loop() is not asyncio.get_running_loop():
            shared = asyncio.ensure_future(run_in_threadpool(self.resolve, header))
            self._resolving[header] = shared
            shared.add_done_callback(lambda done: self._resolved(header, done))
        # Shielded: a request that goes away does not cancel the others' lookup.
        return await asyncio.shield(shared)

    def _resolved(self, header: str, done: asyncio.Future[Principal]) -> None:
        if self._resolving.get(header) is done:
            del self._resolving[header]
        if not done.cancelled():
            done.exception()  # retrieved here too: every waiter may have gone away

    def require_admin(self, header: str | None) -> Principal:
        principal = self.authenticate(header)
        if not principal.is_admin:
            raise Forbidden("this endpoint needs an admin token")
        return principal

    def require_reader(self, header: str | None) -> Principal:
        principal = self.authenticate(header)
        if not principal.may_read():
            raise Forbidden("this token may not read")
        return principal


class PreAuthMiddleware:
    """Resolve the bearer token of /v1/ and /metrics requests before the route runs.

    A plain ASGI middleware (Starlette's BaseHTTPMiddleware costs a task and a stream per
    request). The answer is found on the loop when it needs no database (`resolve_now`),
    else in a worker thread.
    """

    PREFIXES = ("/v1/", "/metrics")

    def __init__(self, app: Any, auth: Authenticator) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.PREFIXES):
            await self.app(scope, receive, send)
            return
        header = authorization(scope)
        if not header:
            await self.app(scope, receive, send)
            return
        answer: Principal | EttError
        try:
            answer = await self.auth.resolve_on_loop(header)
        except EttError as exc:
            answer = exc
        token = _RESOLVED.set((header, answer))
        try:
            await self.app(scope, receive, send)
        finally:
            _RESOLVED.reset(token)


def authorization(scope: Any) -> str | None:
    """The first Authorization header, as Starlette's `Headers.get` would return it."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            return value.decode("latin-1")
    return None
