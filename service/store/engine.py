"""Connecting to the database: URLs, engines, the configured database (a server or the
embedded one), and the mapping of "the database is not there" to 503."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from service.errors import ConfigError, Unavailable
from service.settings import Settings

from .embedded import EmbeddedPostgres, load_or_create_admin_token

log = logging.getLogger(__name__)


def normalize_url(url: str) -> str:
    """Accept plain postgresql:// URLs and pin the psycopg 3 driver."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.drivername != "postgresql+psycopg":
        raise ValueError(
            f"database URL must be postgresql:// or postgresql+psycopg://, got {parsed.drivername}"
        )
    return parsed.render_as_string(hide_password=False)


def make_engine(
    url: str,
    *,
    pool_size: int = 8,
    pool_timeout_s: float = 5.0,
    statement_timeout_ms: int = 30_000,
    connect_timeout_s: int = 5,
) -> Engine:
    engine = create_engine(
        normalize_url(url),
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_timeout=pool_timeout_s,
        pool_pre_ping=True,
        connect_args={"connect_timeout": connect_timeout_s},
    )
    if statement_timeout_ms:

        @event.listens_for(engine, "connect")
        def _set_timeouts(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
            with dbapi_conn.cursor() as cur:
                cur.execute(f"SET statement_timeout = {int(statement_timeout_ms)}")
            dbapi_conn.commit()

    return engine


def display_url(url: str) -> str:
    parsed = make_url(url)
    return parsed.render_as_string(hide_password=True) if parsed.password else str(parsed)


@contextmanager
def db_unavailable(what: str) -> Iterator[None]:
    """Turn "the database is not there (now)" into 503 + Retry-After; let bugs through."""
    try:
        yield
    except PoolTimeout:
        raise Unavailable(f"{what}: database connection pool exhausted; retry later") from None
    except (OperationalError, InterfaceError) as exc:
        # Refused or timed-out connects, a server shutting down, a statement timeout, a
        # connection that died mid-transaction (the commit did not happen, or the client
        # cannot know: a retry is a duplicate, which changes nothing).
        log.warning("%s: database unavailable: %s", what, exc.orig)
        raise Unavailable(f"{what}: database unavailable; retry later") from None
    except DBAPIError as exc:
        if exc.connection_invalidated:
            raise Unavailable(f"{what}: database connection lost; retry later") from None
        raise


@dataclass
class Database:
    url: str
    engine: Engine
    embedded: bool
    admin_token: str | None
    admin_token_generated: bool

    def describe(self) -> str:
        kind = "embedded PostgreSQL" if self.embedded else "PostgreSQL"
        return f"{kind} at {display_url(self.url)}"


class NoDatabase(ConfigError):
    """A command other than `ett serve` found no database: it never creates one."""


def _missing_embedded(settings: Settings) -> NoDatabase:
    where = settings.data_dir.resolve()
    return NoDatabase(
        f"no ETT database at {where} (ETT_DATA_DIR, default ./.ett-data in the current"
        " directory) and ETT_DATABASE_URL is unset: run this command from the directory where"
        " `make run` / `ett serve` runs, or set ETT_DATA_DIR=/path/to/.ett-data or"
        " ETT_DATABASE_URL=postgresql://...; only `ett serve` creates a database"
    )


@contextmanager
def open_database(settings: Settings, *, pool_size: int | None = None,
                  create: bool = False) -> Iterator[Database]:
    """Connect to ETT_DATABASE_URL, or start the embedded server in ETT_DATA_DIR.

    Only `ett serve` passes `create=True`: a command run from the wrong directory must say
    where it looked, not quietly start an empty database with a new admin token.
    """
    embedded: EmbeddedPostgres | None = None
    token = settings.admin_token_value()
    generated = False
    if settings.database_url:
        try:
            url = normalize_url(settings.database_url)
        except (ValueError, ArgumentError) as exc:
            raise ConfigError(f"ETT_DATABASE_URL: {exc}; expected"
                              " postgresql://USER:PASSWORD@HOST:5432/DATABASE") from None
    else:
        if not create and not EmbeddedPostgres(settings.data_dir).exists():
            raise _missing_embedded(settings)
        embedded = EmbeddedPostgres(settings.data_dir)
        url = embedded.start()
        if token is None:
            token, generated = load_or_create_admin_token(settings.data_dir)
    engine = make_engine(
        url,
        pool_size=pool_size or settings.db_pool_size,
        pool_timeout_s=settings.db_pool_timeout_s,
        statement_timeout_ms=settings.db_statement_timeout_ms,
    )
    try:
        yield Database(url, engine, embedded is not None, token, generated)
    finally:
        engine.dispose()
        if embedded is not None:
            embedded.stop()
