"""Start-up wiring shared by the CLI commands: database, token, logging."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import Engine

from .database import EmbeddedPostgres, display_url, load_or_create_admin_token, make_engine
from .settings import Settings


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


@contextmanager
def open_database(settings: Settings, *, pool_size: int | None = None) -> Iterator[Database]:
    """Connect to ETT_DATABASE_URL, or start the embedded server in ETT_DATA_DIR."""
    embedded: EmbeddedPostgres | None = None
    token = settings.admin_token_value()
    generated = False
    if settings.database_url:
        url = settings.database_url
    else:
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


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        stream=sys.stderr,
        format="%(asctime)s level=%(levelname)s logger=%(name)s %(message)s",
    )
    # Chatty at INFO: start-up steps, and a line per request the demo fleet posts.
    for noisy in ("pgserver", "alembic", "httpx"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))
