"""Caller-side cost of the ett_client SDK: how long a recording call holds the training thread.

For each scenario (service up; service blackholed: accepts connections, never answers)
it runs 5 runs of 20,000 calls each (2,000 with --quick), timing every call with
perf_counter_ns, and prints the median per-call latency (median over runs, with min-max
spread), the p99 and the slowest call. Target: under 5 us median per recorded event, and
no call ever blocks on the network (the blackholed service must cost what the live one
does). A record is appended to bench/results/sdk.json.

    python -m bench --only sdk
"""

from __future__ import annotations

import json
import logging
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ett_client import Recorder

from .common import record

NAME = "sdk"


@contextmanager
def service_up() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            n = len(json.loads(self.rfile.read(int(self.headers["Content-Length"])))["events"])
            body = json.dumps({"accepted": n, "duplicates": 0, "rejected": []}).encode()
            self.send_response(202)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def service_blackholed() -> Iterator[str]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)  # the kernel completes handshakes; nobody ever reads or answers
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


def time_calls(call: Callable[[int], None], calls: int) -> list[int]:
    out = [0] * calls
    clock = time.perf_counter_ns
    for i in range(calls):
        t0 = clock()
        call(i)
        out[i] = clock() - t0
    return out


def make_call(rec: Recorder, kind: str) -> Callable[[int], None]:
    if kind == "heartbeat":
        return lambda i: rec.heartbeat(step=i)

    def phase(i: int) -> None:
        with rec.phase("training"):
            pass

    return phase


def run_scenario(url: str, calls: int, runs: int, kind: str) -> dict[str, float]:
    medians, p99s, worst = [], [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as spool:
            rec = Recorder(url=url, token="t", job_id="bench", model="bench", gpus=8,
                           spool_dir=spool, install_hooks=False, max_queue=calls * 4,
                           request_timeout_s=30.0)
            rec.allocated()
            time.sleep(0.2)  # let the sender reach its steady state (or get stuck)
            samples = time_calls(make_call(rec, kind), calls)
            rec.close(timeout=1.0)
        samples.sort()
        medians.append(samples[len(samples) // 2] / 1000)
        p99s.append(samples[int(len(samples) * 0.99)] / 1000)
        worst.append(samples[-1] / 1000)
    return {
        "median_us": round(statistics.median(medians), 3),
        "median_min_us": round(min(medians), 3),
        "median_max_us": round(max(medians), 3),
        "p99_us": round(statistics.median(p99s), 3),
        "max_us": round(max(worst), 1),
    }


def run(_pg: object, quick: bool, runs: int = 5) -> dict:
    calls = 2_000 if quick else 20_000
    # Closing a recorder whose service never answers warns about its spool, by design.
    logging.getLogger("ett_client").setLevel(logging.ERROR)
    results: dict[str, dict[str, float]] = {}
    for name, server in (("service_up", service_up), ("service_blackholed", service_blackholed)):
        with server() as url:
            for kind in ("heartbeat", "phase_enter_exit"):
                key = f"{name}/{kind}"
                results[key] = run_scenario(url, calls, runs, kind)
                r = results[key]
                print(f"{key:36s} median {r['median_us']:.2f} us "
                      f"(runs {r['median_min_us']:.2f}-{r['median_max_us']:.2f}), "
                      f"p99 {r['p99_us']:.2f} us, max {r['max_us']:.0f} us")
    figures = {"calls_per_run": calls, "runs": runs, "results": results,
               "note": "phase_enter_exit is two events (start and end) per call"}
    targets = []
    for key, r in results.items():
        per_event = r["median_us"] / (2 if key.endswith("phase_enter_exit") else 1)
        targets.append((f"{key}: < 5 us median per recorded event",
                        f"{per_event:.2f} us/event (call {r['median_us']:.2f} us,"
                        f" runs {r['median_min_us']:.2f}-{r['median_max_us']:.2f}),"
                        f" p99 {r['p99_us']:.1f} us, max {r['max_us'] / 1000:.1f} ms",
                        per_event < 5))
    up = results["service_up/heartbeat"]["p99_us"]
    down = results["service_blackholed/heartbeat"]["p99_us"]
    targets.append(("no call blocks on the network: blackholed p99 within 2x of live p99",
                    f"{down:.1f} us vs {up:.1f} us", down <= 2 * up + 1))
    return record(NAME, quick, figures, targets)
