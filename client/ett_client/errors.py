"""One exception base, and the guard that keeps telemetry from ever crashing training.

Every public entry point of the SDK runs under :func:`guarded`. In the default mode an
error inside the SDK is logged (once per entry point, so a broken setup cannot flood the
training log) and swallowed; in strict mode (``strict=True`` or ``ETT_STRICT=1``), meant for
development and CI, it is raised as an :class:`EttClientError` so mistakes surface early.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Any, ParamSpec, Protocol, TypeVar

logger = logging.getLogger("ett_client")

P = ParamSpec("P")
R = TypeVar("R")


class EttClientError(Exception):
    """Base of every error the SDK raises (only ever raised in strict mode)."""


class InvalidEventError(EttClientError, ValueError):
    """An argument would make an event the service rejects (bad name, cause, reason...)."""


class ConfigurationError(EttClientError):
    """The recorder cannot be configured (missing URL, job id or model; bad values)."""


class _Guarded(Protocol):
    _strict: bool


_warned: set[str] = set()
_warned_lock = threading.Lock()


def warn_once(key: str, message: str, *args: object, exc_info: bool = False) -> None:
    """Log a warning the first time ``key`` is seen in this process, debug afterwards."""
    with _warned_lock:
        first = key not in _warned
        _warned.add(key)
    level = logging.WARNING if first else logging.DEBUG
    logger.log(level, message, *args, exc_info=exc_info)


def guarded(default: Any = None) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a public method of an object with a ``_strict`` attribute.

    Non-strict: any exception is logged once per method and ``default`` is returned.
    Strict: exceptions propagate, re-wrapped as :class:`EttClientError` when they are not
    already one, so callers only ever need to catch the one base class.
    """

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        name = fn.__qualname__

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                owner: _Guarded = args[0]  # type: ignore[assignment]
                if getattr(owner, "_strict", False):
                    if isinstance(exc, EttClientError):
                        raise
                    raise EttClientError(f"{name} failed: {exc!r}") from exc
                warn_once(f"guard:{name}", "ett_client: %s failed and was ignored: %r",
                          name, exc, exc_info=True)
                return default  # type: ignore[no-any-return]

        return wrapper

    return decorate
