"""`ett serve` with no database URL runs on an embedded PostgreSQL in the data directory."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import pytest

from tests.conftest import REPO, free_port
from tests.factories import event


def _serve(data_dir, port: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("ETT_DATABASE_URL", "ETT_ADMIN_TOKEN")}
    env.update(ETT_DATA_DIR=str(data_dir), ETT_LOG_LEVEL="warning")
    return subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--no-aggregator"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


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
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
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
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert "admin token (stored" in out
