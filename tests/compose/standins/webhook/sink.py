"""POST /hooks/<team>: keep the notification; GET /received: every one so far, as JSON."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

RECEIVED: list[dict] = []
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
        with LOCK:
            RECEIVED.append({"path": self.path, "body": body})
        self.send_response(200)
        self.end_headers()

    def do_GET(self) -> None:
        with LOCK:
            payload = json.dumps(RECEIVED).encode()
        self.send_response(200 if self.path == "/received" else 404)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(payload if self.path == "/received" else b"{}")


ThreadingHTTPServer(("0.0.0.0", 9095), Handler).serve_forever()
