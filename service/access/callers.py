"""Who is calling: FastAPI dependencies that turn a request's bearer token into a principal.

A route names the caller it needs in its signature (`Reader`, `Admin`, `EventWriter`, ...)
and receives the principal; the check runs before the route's body, and its refusal is the
same 401 or 403 everywhere. The authenticator is the app's (`app.state.auth`, set by
`service.api.app.create_app`), so a route never reaches for the header itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Request

from service.errors import Forbidden

from .auth import Authenticator, Principal


def authenticator(request: Request) -> Authenticator:
    return request.app.state.auth


async def caller(request: Request) -> Principal:
    """Any valid token."""
    return authenticator(request).authenticate(request.headers.get("authorization"))


async def reader(request: Request) -> Principal:
    return authenticator(request).require_reader(request.headers.get("authorization"))


async def admin(request: Request) -> Principal:
    return authenticator(request).require_admin(request.headers.get("authorization"))


def writing(principal: Principal, what: str) -> Principal:
    """`principal`, if it may post `what` (events, spans): any role but a reader."""
    if principal.role == "reader":
        raise Forbidden(f"a reader token may not post {what}")
    return principal


def writer_of(what: str) -> Callable[[Request], Awaitable[Principal]]:
    """A token that may post `what` (events, spans): any role but a reader. Which models
    and teams it may write is decided event by event (service.wire.batch)."""

    async def writer(request: Request) -> Principal:
        return writing(await caller(request), what)

    writer.__name__ = f"writer_of_{what}"
    return writer


Caller = Annotated[Principal, Depends(caller)]
Reader = Annotated[Principal, Depends(reader)]
Admin = Annotated[Principal, Depends(admin)]
EventWriter = Annotated[Principal, Depends(writer_of("events"))]
SpanWriter = Annotated[Principal, Depends(writer_of("spans"))]
