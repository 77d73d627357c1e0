"""Real Prometheus, Alertmanager and a webhook sink for end-to-end tests."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import yaml

from tests.conftest import free_port

PROMETHEUS = shutil.which("prometheus")
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


class WebhookSink:
    """Records every Alertmanager notification by receiver path (/hooks/<team>)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/hooks"
        self.received: list[tuple[str, dict]] = []
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                sink.received.append((self.path.rsplit("/", 1)[-1], json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def teams(self) -> set[str]:
        return {team for team, _ in self.received}

    def alerts(self, team: str) -> list[dict]:
        return [a for t, body in self.received if t == team for a in body["alerts"]]

    def close(self) -> None:
        self.server.shutdown()


def _wait_http(url: str, proc: subprocess.Popen, log: Path, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not ready: {log.read_text()[-2000:]}")


@contextmanager
def alertmanager(config: Path, workdir: Path) -> Iterator[str]:
    port = free_port()
    log = workdir / "alertmanager.log"
    proc = subprocess.Popen(
        [ALERTMANAGER, f"--config.file={config}", f"--storage.path={workdir / 'am-data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
        stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_http(url + "/-/ready", proc, log)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)


class Prometheus:
    def __init__(self, url: str, proc: subprocess.Popen) -> None:
        self.url = url
        self.proc = proc

    def reload(self, timeout_s: float = 30) -> None:
        """Re-read the configuration and rule files (SIGHUP), and wait until it has."""
        before = self._reloads()
        self.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + timeout_s
        while self._reloads() <= before and time.monotonic() < deadline:
            time.sleep(0.2)

    def _reloads(self) -> float:
        text = httpx.get(self.url + "/metrics", timeout=5).text
        for line in text.splitlines():
            if line.startswith("prometheus_config_last_reload_success_timestamp_seconds "):
                return float(line.split()[1])
        return 0.0


@contextmanager
def prometheus(targets: list[str], rules_dir: Path, alertmanager_url: str, workdir: Path,
               interval: str = "2s") -> Iterator[Prometheus]:
    port = free_port()
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(rules_dir / "*.yaml")],
        "alerting": {"alertmanagers": [{"static_configs": [
            {"targets": [alertmanager_url.removeprefix("http://")]}]}]},
        "scrape_configs": [{"job_name": "ett", "static_configs": [{"targets": targets}]}],
    }
    cfg = workdir / "prometheus.yml"
    cfg.write_text(yaml.safe_dump(config))
    log = workdir / "prometheus.log"
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={workdir / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_http(url + "/-/ready", proc, log)
        yield Prometheus(url, proc)
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def query(prom_url: str, expr: str) -> list[dict]:
    r = httpx.get(prom_url + "/api/v1/query", params={"query": expr}, timeout=10)
    r.raise_for_status()
    return r.json()["data"]["result"]
