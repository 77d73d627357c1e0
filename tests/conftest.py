"""Shared fixtures: a real PostgreSQL (ETT_TEST_DATABASE_URL, else an embedded one), the app,
and a real `ett serve` subprocess.

Each test that needs the database asks for `db_engine` (schema at head, tables emptied
before the test) or `service`; nothing here is an in-memory stand-in. Every test that
reaches the server through its fixtures carries the `db` mark (`-m "not db"` runs the
others), set here rather than by hand.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from service.store import migrate
from service.store.engine import EmbeddedPostgres, make_engine, normalize_url

REPO = Path(__file__).resolve().parent.parent
ADMIN_TOKEN = "test-admin-token"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Every database fixture (db_engine, service, api, ...) stands on pg_server_url, so it
    # is in the fixture closure of exactly the tests that touch PostgreSQL.
    for item in items:
        if "pg_server_url" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.db)


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    """URL of a PostgreSQL server the tests may create databases on."""
    url = os.environ.get("ETT_TEST_DATABASE_URL")
    if url:
        yield normalize_url(url)
        return
    tmp = Path(tempfile.mkdtemp(prefix="ett-test-pg-"))
    embedded = EmbeddedPostgres(tmp)
    try:
        yield embedded.start()
    finally:
        embedded.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def create_database(server_url: str, prefix: str = "ett_test") -> str:
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = create_engine(
        make_url(server_url).set(database="postgres"), isolation_level="AUTOCOMMIT"
    )
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return make_url(server_url).set(database=name).render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def database_url(pg_server_url: str) -> str:
    """A fresh database for this test session, migrated to head."""
    url = create_database(pg_server_url)
    engine = make_engine(url, pool_size=2)
    migrate.upgrade(engine)
    engine.dispose()
    return url


@pytest.fixture(scope="session")
def _session_engine(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url, pool_size=8)
    yield engine
    engine.dispose()


def truncate_all(engine: Engine) -> None:
    from service.store.tables import metadata

    names = ", ".join(t.name for t in metadata.sorted_tables)
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {names} RESTART IDENTITY"))


@pytest.fixture
def db_engine(_session_engine: Engine) -> Engine:
    """The session database, emptied before the test."""
    truncate_all(_session_engine)
    return _session_engine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServiceProcess:
    """A real `ett serve` subprocess on its own database and port."""

    def __init__(self, database_url: str, extra_env: dict[str, str] | None = None,
                 args: tuple[str, ...] = ()) -> None:
        self.database_url = database_url
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = ADMIN_TOKEN
        self.args = args
        self.env = {
            **os.environ,
            "ETT_DATABASE_URL": database_url,
            "ETT_ADMIN_TOKEN": ADMIN_TOKEN,
            "ETT_LOG_LEVEL": "warning",
            **(extra_env or {}),
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = Path(tempfile.mkstemp(prefix="ett-serve-", suffix=".log")[1])

    def start(self, timeout_s: float = 30.0) -> None:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "serve", "--port", str(self.port), *self.args],
            cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ett serve exited: {self.log_path.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"ett serve did not become ready: {self.log_path.read_text()[-3000:]}")

    def stop(self, sig: int | None = None) -> None:
        if self.proc is None:
            return
        if sig is None:
            self.proc.terminate()
        else:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@pytest.fixture(scope="session")
def service(pg_server_url: str) -> Iterator[ServiceProcess]:
    """A running `ett serve` (API, aggregator, metrics) on a database of its own."""
    proc = ServiceProcess(create_database(pg_server_url, "ett_svc"))
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
def service_factory(pg_server_url: str) -> Iterator[object]:
    """Start extra `ett serve` processes (own database unless one is given)."""
    started: list[ServiceProcess] = []

    def make(database_url: str | None = None, **kwargs: object) -> ServiceProcess:
        proc = ServiceProcess(database_url or create_database(pg_server_url, "ett_svc"),
                              **kwargs)  # type: ignore[arg-type]
        proc.start()
        started.append(proc)
        return proc

    yield make
    for proc in started:
        proc.stop()


def make_context(engine: Engine, *, with_aggregator: bool = True, **settings: object
                 ) -> object:
    """The app's context as `ett serve` builds it (service.api.context), on `engine`, with
    the admin token and any settings given."""
    from service.api.context import build_context
    from service.settings import Settings

    return build_context(Settings(database_url="postgresql://unused", admin_token=ADMIN_TOKEN,
                                  **settings),  # type: ignore[arg-type]
                         engine, with_aggregator=with_aggregator)


@pytest.fixture
def app_context(db_engine: Engine) -> object:
    return make_context(db_engine)


@pytest.fixture
def api(app_context: object) -> Iterator[object]:
    """An in-process client of the real app, on the real test database."""
    from fastapi.testclient import TestClient

    from service.api.app import create_app

    with TestClient(create_app(app_context)) as client:  # type: ignore[arg-type]
        client.headers["Authorization"] = f"Bearer {ADMIN_TOKEN}"
        yield client


@pytest.fixture
def agg(app_context: object) -> object:
    """The app's aggregator, its clock fixed at `tests.factories.NOW` (after every event)."""
    from tests.factories import fixed

    app_context.aggregator.clock = fixed()  # type: ignore[attr-defined]
    return app_context.aggregator  # type: ignore[attr-defined]


@pytest.fixture
def taxonomy_file(tmp_path: Path) -> Path:
    """The default taxonomy plus an ownership entry: ads_ctr belongs to team ads."""
    import yaml

    from service.taxonomy import DEFAULT_TAXONOMY_PATH

    data = yaml.safe_load(DEFAULT_TAXONOMY_PATH.read_text())
    data["models"] = {"ads_ctr": "ads", "ads_shared": "ads-platform"}
    path = tmp_path / "taxonomy.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def make_client(db_engine: Engine) -> Iterator[object]:
    """Clients of apps made with the settings given (`make_client(token_cache_ttl_s=0.5)`);
    `token_clock` puts the app's token store on a clock the test moves."""
    from fastapi.testclient import TestClient

    from service.api.app import create_app
    from service.api.context import build_context
    from service.settings import Settings

    clients: list[TestClient] = []

    def make(token_clock: object | None = None, **overrides: object) -> TestClient:
        settings = Settings(database_url="postgresql://unused", admin_token=ADMIN_TOKEN,
                            **overrides)  # type: ignore[arg-type]
        ctx = build_context(settings, db_engine, with_aggregator=False,
                            token_clock=token_clock)  # type: ignore[arg-type]
        client = TestClient(create_app(ctx))
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)


@pytest.fixture
def client(make_client, taxonomy_file: Path) -> object:
    """A client of an app on the test taxonomy (`taxonomy_file`), no token attached."""
    return make_client(taxonomy=taxonomy_file)
