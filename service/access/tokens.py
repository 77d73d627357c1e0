"""The token store: role-scoped API tokens, kept hashed in PostgreSQL.

A token is `ett_<token_id>_<secret>`: the id (also the row's key, shown by `ett tokens
list`) and 256 random bits. Only SHA-256 of the whole token is stored. A slow password hash
(bcrypt, argon2) defends low-entropy secrets against offline guessing; a 256-bit random
secret cannot be guessed whatever the hash, and a salted slow hash would cost ~100 ms of CPU
per uncached request and rule out the indexed lookup by hash.

The SQL functions never commit (the caller owns the transaction). `TokenStore` is what the
API uses: an in-process cache with a short TTL (revocation reaches every replica within
that TTL), and last-use times kept in memory and written in one UPDATE at most every
`last_used_flush_s`, never a write per request.
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Connection, Engine, text

from service.settings import default
from service.store.engine import db_unavailable
from service.wire.event import NAME_RE

from .auth import ROLES, Principal

log = logging.getLogger(__name__)

TOKEN_PREFIX = "ett_"
# fnmatch patterns over model names: the model alphabet plus * ? [ ] !
PATTERN_RE = re.compile(r"[A-Za-z0-9._:/*?\[\]!-]{1,200}")


class TokenError(ValueError):
    """A token request the store refuses (bad role, pattern or team); the message says why."""


@dataclass(frozen=True)
class TokenInfo:
    token_id: str
    role: str
    team: str | None
    model_patterns: tuple[str, ...]
    note: str | None
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None

    def principal(self) -> Principal:
        return Principal(role=self.role, token_id=self.token_id, team=self.team,
                         model_patterns=self.model_patterns)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> tuple[str, str]:
    """A fresh (token_id, token)."""
    token_id = "tok_" + secrets.token_hex(6)
    return token_id, f"{TOKEN_PREFIX}{token_id}_{secrets.token_urlsafe(32)}"


_SCOPE_OF_ROLE = {"admin": "may do everything",
                  "adapter": "send scheduler events for any model"}


def check_request(role: str, team: str | None, patterns: Sequence[str]) -> tuple[str, ...]:
    if role not in ROLES:
        raise TokenError(f"role: must be one of {', '.join(ROLES)}, got {role!r}")
    if team is not None and not NAME_RE.fullmatch(team):
        raise TokenError(f"team: must be 1-200 characters of letters, digits and . _ : / -,"
                         f" got {team!r}")
    for pattern in patterns:
        if not PATTERN_RE.fullmatch(pattern):
            raise TokenError(f"models: {pattern!r} is not a model name pattern (letters, digits,"
                             " . _ : / - and the wildcards * ? [ ])")
    if role == "writer" and not patterns:
        raise TokenError("models: a writer token needs at least one model pattern, e.g. 'ads_*'")
    if role != "writer" and patterns:
        raise TokenError(f"models: only writer tokens have model patterns ({role} tokens "
                         f"{_SCOPE_OF_ROLE.get(role, 'only read')})")
    return tuple(dict.fromkeys(patterns))


_COLUMNS = ("token_id, role, team, model_patterns, note, created_at, last_used_at,"
            " revoked_at")


def _info(row: Sequence[object]) -> TokenInfo:
    token_id, role, team, patterns, note, created, used, revoked = row
    return TokenInfo(str(token_id), str(role), team, tuple(patterns or ()),  # type: ignore[arg-type]
                     note, created, used, revoked)  # type: ignore[arg-type]


def create_token(conn: Connection, role: str, team: str | None = None,
                 model_patterns: Sequence[str] = (), note: str | None = None
                 ) -> tuple[TokenInfo, str]:
    """Store a new token; return its row and the secret token (shown once, never stored)."""
    patterns = check_request(role, team, model_patterns)
    token_id, token = new_token()
    row = conn.execute(
        text(f"INSERT INTO api_tokens (token_id, secret_sha256, role, team, model_patterns,"
             f" note) VALUES (:id, :h, :role, :team, :patterns, :note) RETURNING {_COLUMNS}"),
        {"id": token_id, "h": hash_token(token), "role": role, "team": team,
         "patterns": list(patterns), "note": note},
    ).one()
    return _info(row), token


def list_tokens(conn: Connection, *, include_revoked: bool = True) -> list[TokenInfo]:
    where = "" if include_revoked else " WHERE revoked_at IS NULL"
    rows = conn.execute(text(f"SELECT {_COLUMNS} FROM api_tokens{where} ORDER BY created_at,"
                             " token_id"))
    return [_info(r) for r in rows]


def revoke_token(conn: Connection, token_id: str) -> TokenInfo | None:
    """Revoke (idempotent: the first revocation time is kept); None if the id is unknown."""
    row = conn.execute(
        text(f"UPDATE api_tokens SET revoked_at = coalesce(revoked_at, now())"
             f" WHERE token_id = :id RETURNING {_COLUMNS}"),
        {"id": token_id},
    ).one_or_none()
    return None if row is None else _info(row)


def find_active_by_digest(conn: Connection, digests: Sequence[str]) -> dict[str, TokenInfo]:
    """The active tokens among `digests` (SHA-256 hex of whole tokens), by digest; a digest
    missing from the answer is unknown or revoked."""
    rows = conn.execute(
        text(f"SELECT secret_sha256, {_COLUMNS} FROM api_tokens"
             " WHERE secret_sha256 = ANY(CAST(:hs AS text[])) AND revoked_at IS NULL"),
        {"hs": list(digests)},
    )
    return {str(row[0]): _info(row[1:]) for row in rows}


def record_last_used(conn: Connection, uses: dict[str, datetime]) -> None:
    """One UPDATE for many tokens; a time never moves backwards."""
    if not uses:
        return
    ids = sorted(uses)
    conn.execute(
        text("UPDATE api_tokens AS t SET last_used_at = GREATEST(t.last_used_at, u.at)"
             " FROM unnest(CAST(:ids AS text[]), CAST(:ats AS timestamptz[])) AS u(id, at)"
             " WHERE t.token_id = u.id"),
        {"ids": ids, "ats": [uses[i] for i in ids]},
    )


@dataclass
class _Cached:
    principal: Principal | None  # None: unknown or revoked (cached too, so bad tokens are cheap)
    expires: float
    used: bool = False  # answered from the cache since it was filled (the token is in use)


class TokenStore:
    """Token lookups for the API: a short-TTL cache in front of `api_tokens`.

    The tokens in use are looked up again in the background once two thirds of an entry's
    TTL have passed (`peek`), so their requests keep being answered on the loop; a
    revocation still takes effect within the TTL, since the entry expires whatever the
    refresh did. One query refreshes every token in use whose entry is past a third of its
    TTL (`_refresh_in_use`), so the tokens' refreshes fall into step: a fleet posting
    through hundreds of tokens costs one query per cycle, not a thread and a query per
    token (docs/performance.md, "Many small writers", round 6).
    When an entry expired all the same (a token idle for a while), the requests that find
    it so share one query (`_load`). Without either, every request of a busy token that
    comes in between its entry's expiry and the first lookup's answer would go to a worker
    thread and ask the database itself: a hundred queries at once for a token with a
    hundred trainers posting, every TTL, while other tokens' requests wait behind them
    (docs/performance.md, "Many small writers", round 5). The last-use flush is started in
    the background by a request too, for the same reason."""

    MAX_ENTRIES = 10_000
    # Shares of the TTL still left on an entry: a hit with DUE_LEFT or less left starts the
    # refresh, and every entry in use with JOIN_LEFT or less left is refreshed with it.
    DUE_LEFT, JOIN_LEFT = 1 / 3, 2 / 3

    def __init__(self, engine: Engine, *,
                 cache_ttl_s: float = default("token_cache_ttl_s"),
                 last_used_flush_s: float = default("token_last_used_flush_s"),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._engine = engine
        self._ttl = cache_ttl_s
        self._flush_every = last_used_flush_s
        self._clock = clock
        self._lock = threading.Lock()
        self._cache: dict[str, _Cached] = {}
        # The query under way for a digest (a background refresh's too), which other
        # lookups of it wait for.
        self._loading: dict[str, Future[_Cached]] = {}
        self._uses: dict[str, datetime] = {}
        self._last_flush = clock()
        self._flushing = False
        self._refreshing = False  # a refresh of the tokens in use is under way

    def lookup(self, token: str) -> Principal | None:
        """The token's principal, None if unknown or revoked; Unavailable if the DB is down."""
        digest = hash_token(token)
        now = self._clock()
        with self._lock:
            hit = self._cache.get(digest)
        if hit is None or hit.expires <= now:
            hit = self._load(digest)
        if hit.principal is not None:
            with self._lock:
                self._uses[hit.principal.token_id] = datetime.now(UTC)
        self._maybe_flush(now)
        return hit.principal

    def _load(self, digest: str) -> _Cached:
        """Ask the database and cache the answer; a query for the same digest already
        under way is waited for instead (its answer or its error)."""
        with self._lock:
            pending = self._loading.get(digest)
            mine = pending is None
            if pending is None:
                pending = self._loading[digest] = Future()
        if mine:
            self._fill({digest: pending})
        return pending.result()

    def peek(self, token: str) -> Principal | None:
        """`lookup()`'s answer for a cached valid token, without the database; else None
        (not cached, expired, or cached as invalid), and the caller then calls `lookup()`
        off the event loop. A hit records the use just as `lookup()` does, and starts the
        refresh of the tokens in use or the due last-use flush in a background thread."""
        digest = hash_token(token)
        now = self._clock()
        with self._lock:
            hit = self._cache.get(digest)
            if hit is None or hit.expires <= now or hit.principal is None:
                return None
            hit.used = True
            refresh = hit.expires - now <= self._ttl * self.DUE_LEFT and not self._refreshing
            if refresh:
                self._refreshing = True
            self._uses[hit.principal.token_id] = datetime.now(UTC)
            flush = self._take_flush(now)
        if refresh:
            _in_background(self._refresh_in_use)
        if flush:
            _in_background(self._flush_due)
        return hit.principal

    def _refresh_in_use(self) -> None:
        """Look up again, in one query, every token answered from the cache whose entry is
        past a third of its TTL (and not being looked up already)."""
        try:
            with self._lock:
                joins_by = self._clock() + self._ttl * self.JOIN_LEFT
                batch: dict[str, Future[_Cached]] = {
                    digest: Future() for digest, hit in self._cache.items()
                    if hit.used and hit.principal is not None and digest not in self._loading
                    and hit.expires <= joins_by}
                self._loading.update(batch)
            if batch:
                self._fill(batch)
        except Exception as exc:  # the entries expire; the requests that find them report it
            log.debug("tokens: background lookup failed: %s", exc)
        finally:
            with self._lock:
                self._refreshing = False

    def _fill(self, batch: dict[str, Future[_Cached]]) -> None:
        """Run the query the futures of `batch` stand for (each claimed in `_loading` by
        the caller), cache its answers and hand each, or the error, to every lookup waiting
        on it."""
        try:
            now = self._clock()
            with db_unavailable("cannot check the tokens"), self._engine.connect() as conn:
                found = find_active_by_digest(conn, list(batch))
            hits = {digest: _Cached(found[digest].principal() if digest in found else None,
                                    now + self._ttl) for digest in batch}
            with self._lock:
                if len(self._cache) + len(hits.keys() - self._cache.keys()) > self.MAX_ENTRIES:
                    self._cache.clear()
                self._cache.update(hits)
            for digest, pending in batch.items():
                pending.set_result(hits[digest])
        except BaseException as exc:
            for pending in batch.values():
                pending.set_exception(exc)
            raise
        finally:
            with self._lock:
                for digest in batch:
                    del self._loading[digest]

    def _take_flush(self, now: float) -> bool:
        """Whether a last-use write is due, and if so it is the caller's to run (call with
        the lock held)."""
        if self._flushing or now - self._last_flush < self._flush_every or not self._uses:
            return False
        self._flushing = True
        return True

    def _flush_due(self) -> None:
        try:
            self.flush_last_used()
        finally:
            with self._lock:
                self._flushing = False
                self._last_flush = self._clock()

    def _maybe_flush(self, now: float) -> None:
        with self._lock:
            due = self._take_flush(now)
        if due:
            self._flush_due()

    def flush_last_used(self) -> int:
        """Write the pending last-use times; on a database error keep them for next time."""
        with self._lock:
            uses, self._uses = self._uses, {}
        if not uses:
            return 0
        try:
            with self._engine.begin() as conn:
                record_last_used(conn, uses)
        except Exception as exc:
            log.warning("tokens: could not record last use of %d tokens: %s", len(uses), exc)
            with self._lock:
                for token_id, at in uses.items():
                    self._uses[token_id] = max(at, self._uses.get(token_id, at))
            return 0
        return len(uses)


def _in_background(work: Callable[[], object]) -> None:
    # A thread per refresh or flush: at most one per refresh cycle, one per flush interval;
    # a daemon, since a lookup or a last-use write is not worth holding the exit for.
    threading.Thread(target=work, name="ett-token-store", daemon=True).start()
