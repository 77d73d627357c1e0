"""A scriptable stand-in for ``POST /v1/events`` on 127.0.0.1, for the client's unit tests.

Responses are taken from a script (status, headers, delay) and default to the real
service's 202 answer, de-duplicating by ``event_id`` like the service does.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 202
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    reject_indexes: tuple[int, ...] = ()


class FakeService:
    def __init__(self) -> None:
        self.script: list[Reply] = []
        self.requests: list[tuple[float, int, list[dict[str, Any]]]] = []  # (time, status, events)
        self.stored: dict[str, dict[str, Any]] = {}
        self.deliveries: list[str] = []  # event_id of every event in every request
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                fake._handle(self, json.loads(body)["events"])

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def _handle(self, handler: BaseHTTPRequestHandler, events: list[dict[str, Any]]) -> None:
        with self.lock:
            reply = self.script.pop(0) if self.script else Reply()
        if reply.delay_s:
            time.sleep(reply.delay_s)
        with self.lock:
            self.requests.append((time.monotonic(), reply.status, events))
            self.deliveries.extend(e["event_id"] for e in events)
            if reply.status != 202:
                payload: dict[str, Any] = {"detail": "scripted"}
            else:
                accepted = duplicates = 0
                rejected = []
                for i, event in enumerate(events):
                    if i in reply.reject_indexes:
                        rejected.append({"index": i, "error": "ts: scripted rejection"})
                    elif event["event_id"] in self.stored:
                        duplicates += 1
                    else:
                        self.stored[event["event_id"]] = event
                        accepted += 1
                payload = {"accepted": accepted, "duplicates": duplicates, "rejected": rejected}
        data = json.dumps(payload).encode()
        handler.send_response(reply.status)
        for name, value in reply.headers.items():
            handler.send_header(name, value)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def events(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.stored.values())

    def types(self) -> list[str]:
        return [e["type"] for e in sorted(self.events(), key=lambda e: e["ts"])]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def refused_url() -> str:
    """A URL whose port refuses connections (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@contextmanager
def blackhole() -> Iterator[str]:
    """A URL that accepts TCP connections and never answers (a hung load balancer)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
                held.append(conn)
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        listener.close()


def wait_for(predicate: Any, timeout_s: float = 10.0, interval_s: float = 0.01) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return bool(predicate())
