"""`ett serve` with no database URL runs on an embedded PostgreSQL in the data directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta

import httpx
import pytest

from service.cli.serve import STOP_REPORT_S
from tests.conftest import REPO, free_port
from tests.factories import event


def _serve(data_dir, port: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("ETT_DATABASE_URL", "ETT_ADMIN_TOKEN")}
    env.update(ETT_DATA_DIR=str(data_dir), ETT_LOG_LEVEL="warning")
    return subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--no-aggregator"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def _stopped(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> str:
    """Stop `proc` by `sig`; its output. A stop that hangs fails with that output, where
    `ett serve` has written every thread's stack after STOP_REPORT_S."""
    proc.send_signal(sig)
    try:
        return proc.communicate(timeout=STOP_REPORT_S + 40)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"`ett serve` did not stop on {signal.Signals(sig).name}:\n"
                    + proc.communicate()[0])


def _wait_ready(url: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise AssertionError("embedded service did not become ready")


@pytest.mark.slow
def test_embedded_mode_starts_from_empty_and_from_existing_data(tmp_path) -> None:
    data = tmp_path / "ett-data"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    ev = event("heartbeat", 1)

    proc = _serve(data, port)
    try:
        _wait_ready(url, proc)
        token = (data / "admin-token").read_text().strip()
        assert oct((data / "admin-token").stat().st_mode & 0o777) == "0o600"
        r = httpx.post(url + "/v1/events", json={"events": [ev]},
                       headers={"Authorization": f"Bearer {token}"})
        assert r.json()["accepted"] == 1
    finally:
        out = _stopped(proc)
    assert f"listening on {url}" in out
    assert "admin token (generated" in out and token in out
    assert proc.returncode == 0

    proc = _serve(data, port)  # same data directory: same database and token
    try:
        _wait_ready(url, proc)
        r = httpx.post(url + "/v1/events", json={"events": [ev]},
                       headers={"Authorization": f"Bearer {token}"})
        assert r.json() == {"accepted": 0, "duplicates": 1, "rejected": []}
    finally:
        out = _stopped(proc)
    # Shown once, when generated: never again, and the file it names exists.
    assert f"admin token: stored in {data / 'admin-token'} (not shown again)" in out
    assert token not in out


def _postgres_alive(data) -> int | None:
    from service.store.engine import postmaster_pid

    return postmaster_pid(data / "pg")


@pytest.mark.slow
@pytest.mark.parametrize("ending", [signal.SIGHUP, signal.SIGINT, signal.SIGTERM])
def test_serve_stops_its_postgres_on_every_exit_even_after_a_killed_predecessor(
        tmp_path, ending) -> None:
    """A kill -9 leaves PostgreSQL running (it cannot be helped); the next
    `ett serve` reuses it, and its own exit, by any signal, stops it."""
    data = tmp_path / "ett-data"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _serve(data, port)
    _wait_ready(url, proc)
    orphan = _postgres_alive(data)
    assert orphan is not None
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    assert _postgres_alive(data) == orphan  # left behind by the kill

    proc = _serve(data, port)  # finds the predecessor's server in postmaster.pid: reuses it
    try:
        _wait_ready(url, proc)
        token = (data / "admin-token").read_text().strip()
        r = httpx.post(url + "/v1/events", json={"events": [event("heartbeat", 1)]},
                       headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 202
    finally:
        out = _stopped(proc, ending)
    assert _postgres_alive(data) is None, out
    assert not (data / "pg" / "postmaster.pid").exists()


@pytest.mark.slow
def test_a_command_attached_to_a_running_serve_leaves_its_postgres_running(tmp_path) -> None:
    """`ett tokens list` (any command but serve) attaches to the embedded server of a
    running `ett serve`; its exit must not stop the server the service still uses."""
    data = tmp_path / "ett-data"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _serve(data, port)
    try:
        _wait_ready(url, proc)
        postmaster = _postgres_alive(data)
        env = {k: v for k, v in os.environ.items()
               if k not in ("ETT_DATABASE_URL", "ETT_ADMIN_TOKEN")}
        env.update(ETT_DATA_DIR=str(data), ETT_LOG_LEVEL="warning")
        listed = subprocess.run([sys.executable, "-m", "service.cli", "tokens", "list"],
                                cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        assert listed.returncode == 0, listed.stderr
        assert _postgres_alive(data) == postmaster
        token = (data / "admin-token").read_text().strip()
        r = httpx.post(url + "/v1/events", json={"events": [event("heartbeat", 1)]},
                       headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 202, r.text
    finally:
        out = _stopped(proc, signal.SIGINT)
    assert _postgres_alive(data) is None, out


def test_the_banner_never_prints_a_configured_admin_token(tmp_path) -> None:
    from service.cli.serve import admin_token_line
    from service.settings import Settings

    configured = Settings(data_dir=tmp_path, admin_token="s3cret-from-env")
    line = admin_token_line(configured, embedded=True, token="s3cret-from-env",
                            generated=False)
    assert line == "  admin token: from ETT_ADMIN_TOKEN (not shown)"
    unset = Settings(data_dir=tmp_path)
    # No file there: nothing claims one.
    assert admin_token_line(unset, embedded=True, token="t", generated=False) is None
    generated = admin_token_line(unset, embedded=True, token="t0k", generated=True)
    assert generated is not None and generated.endswith("shown only this once): t0k")


def test_a_cluster_of_an_older_postgresql_is_refused_with_the_way_to_carry_it_over(
        tmp_path) -> None:
    # What an ett on PostgreSQL 16 (pgserver) left; the embedded server is 18 now.
    (tmp_path / "pg").mkdir()
    (tmp_path / "pg" / "PG_VERSION").write_text("16\n")
    env = {k: v for k, v in os.environ.items() if k not in ("ETT_DATABASE_URL", "ETT_ADMIN_TOKEN")}
    env.update(ETT_DATA_DIR=str(tmp_path), ETT_LOG_LEVEL="warning")
    done = subprocess.run([sys.executable, "-m", "service.cli", "serve", "--port",
                           str(free_port()), "--no-aggregator"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    out = done.stdout + done.stderr
    assert "PostgreSQL 16 cluster" in out and "upgrade-embedded-postgres.py" in out
    assert "Traceback" not in out
    assert (tmp_path / "pg" / "PG_VERSION").read_text() == "16\n"  # left untouched


@pytest.mark.slow
def test_a_stop_that_hangs_writes_where(tmp_path) -> None:
    """A stop held up (here by a frozen PostgreSQL) writes every thread's stack once it has
    taken STOP_REPORT_S, and still ends cleanly once what held it up goes away."""
    data = tmp_path / "ett-data"
    port = free_port()
    proc = _serve(data, port)
    postmaster = None
    try:
        _wait_ready(f"http://127.0.0.1:{port}", proc)
        postmaster = _postgres_alive(data)
        assert postmaster is not None
        os.kill(postmaster, signal.SIGSTOP)
        proc.send_signal(signal.SIGTERM)
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=STOP_REPORT_S + 3)
    finally:
        if postmaster is not None:
            os.kill(postmaster, signal.SIGCONT)
    out = _stopped(proc)
    assert f"Timeout ({timedelta(seconds=STOP_REPORT_S)})!" in out and "Thread 0x" in out, out
    assert "stop_postmaster" in out or "pg_ctl" in out or "cleanup" in out, out
    assert proc.returncode == 0, out
    assert _postgres_alive(data) is None
