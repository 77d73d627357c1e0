"""Bearer-token authentication and the per-request principal."""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from .errors import Forbidden, Unauthorized

ROLES = ("admin", "writer", "reader")


@dataclass(frozen=True)
class Principal:
    role: str
    token_id: str
    team: str | None = None
    model_patterns: tuple[str, ...] = field(default_factory=tuple)

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    def may_write(self, model: str) -> bool:
        if self.role == "admin":
            return True
        if self.role != "writer":
            return False
        return any(fnmatchcase(model, pattern) for pattern in self.model_patterns)

    def may_read(self) -> bool:
        return self.role in ROLES


def bearer_token(header: str | None) -> str:
    if not header:
        raise Unauthorized("missing Authorization header; send 'Authorization: Bearer <token>'")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("Authorization header must be 'Bearer <token>'")
    return token.strip()


# A lookup for tokens other than the bootstrap admin token (the token store plugs in here).
TokenLookup = Callable[[str], Principal | None]


class Authenticator:
    def __init__(self, admin_token: str | None, lookup: TokenLookup | None = None) -> None:
        self._admin = admin_token.encode() if admin_token else None
        self._lookup = lookup

    def authenticate(self, header: str | None) -> Principal:
        token = bearer_token(header)
        if self._admin is not None and hmac.compare_digest(token.encode(), self._admin):
            return Principal(role="admin", token_id="env-admin")
        if self._lookup is not None:
            principal = self._lookup(token)
            if principal is not None:
                return principal
        raise Unauthorized("invalid or revoked token")

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
