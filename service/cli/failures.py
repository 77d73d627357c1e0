"""Start-up errors a user can cause, each as one line: what failed, where, what to check.

A traceback is for bugs; a wrong URL, a database that is not running or a bad
configuration file is the user's to fix, so it gets a sentence and exit code 2.
"""

from __future__ import annotations

from pydantic import ValidationError
from sqlalchemy.exc import ArgumentError, DBAPIError, OperationalError

from service.errors import EttError

EXIT_CONFIG = 2


class UsageProblem(Exception):
    """A command used wrongly or not configured for it (a missing token, cohorts that cannot
    be told apart): one line on stderr, exit code 2, like argparse's own usage errors."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def token_of(args: object, command: str) -> str:
    """The token a command that talks to the service over HTTP sends: --token, else
    ETT_ADMIN_TOKEN, else the one `make run` stored in the data directory."""
    settings = args.settings  # type: ignore[attr-defined]
    token = getattr(args, "token", None) or settings.admin_token_value()
    stored = settings.data_dir / "admin-token"
    if not token and stored.exists():
        token = stored.read_text().strip()
    if not token:
        raise UsageProblem(
            f"needs a token: pass --token TOKEN, set ETT_ADMIN_TOKEN, or run it where"
            f" `make run` runs (it reads {stored}, which is not there)")
    return token


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), text)


def _settings_problem(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        name = "ETT_" + "_".join(str(p) for p in err["loc"]).upper()
        parts.append(f"{name}={err.get('input')!r}: {err['msg']}")
    return "bad setting: " + "; ".join(parts) + " (see the README's Configuration table)"


def explain(exc: BaseException, database: str | None) -> str | None:
    """The one-line message for a known start-up error, or None for a bug."""
    where = f"PostgreSQL at {database}" if database else "the embedded PostgreSQL"
    from .serve import PortInUse

    if isinstance(exc, PortInUse | UsageProblem):
        return exc.message
    if isinstance(exc, ValidationError):
        return _settings_problem(exc)
    if isinstance(exc, EttError):
        return " ".join(exc.message.split("\n"))
    if isinstance(exc, ArgumentError):
        return (f"ETT_DATABASE_URL cannot be read as a URL ({exc}); expected"
                " postgresql://USER:PASSWORD@HOST:5432/DATABASE")
    if isinstance(exc, OperationalError | DBAPIError):
        reason = _first_line(str(exc.orig) if exc.orig is not None else str(exc))
        return (f"cannot use {where}: {reason}; check that the server is running and that"
                " ETT_DATABASE_URL's host, port, user, password and database are right")
    return None
