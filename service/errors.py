"""One exception base for the server; the app maps each subclass to an HTTP answer."""

from __future__ import annotations


class EttError(Exception):
    """Base of every error the service raises on purpose."""

    status_code = 500

    def __init__(self, message: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.headers = headers or {}


class BadRequest(EttError):
    status_code = 400


class Unauthorized(EttError):
    status_code = 401

    def __init__(self, message: str) -> None:
        super().__init__(message, headers={"WWW-Authenticate": 'Bearer realm="ett"'})


class Forbidden(EttError):
    status_code = 403


class NotFound(EttError):
    status_code = 404


class RequestTimeout(EttError):
    """The client did not send its body within the request's deadline."""

    status_code = 408

    def __init__(self, message: str) -> None:
        super().__init__(message, headers={"Connection": "close"})


class Conflict(EttError):
    status_code = 409


class PayloadTooLarge(EttError):
    status_code = 413


class UnsupportedMediaType(EttError):
    status_code = 415


class Unprocessable(EttError):
    status_code = 422


class Unavailable(EttError):
    """The database cannot take the request now; clients should retry later."""

    status_code = 503

    def __init__(self, message: str, retry_after_s: int = 2) -> None:
        super().__init__(message, headers={"Retry-After": str(retry_after_s)})


class ConfigError(EttError):
    """Bad configuration found at start-up (taxonomy file, SLO spec, settings)."""
