"""`ett serve`: one process with the API, the aggregator loop, /metrics and (with `--demo`)
the demo fleet."""

from __future__ import annotations

import argparse
import contextlib
import errno
import faulthandler
import json
import logging
import os
import signal
import socket
import threading
import urllib.request
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from service.api.context import AppContext
    from service.settings import Settings

log = logging.getLogger("ett.serve")
# Seconds a stop may take (the drain is at most 10) before it writes where it hangs.
STOP_REPORT_S = 20.0


def serve(settings: Settings, *, host: str, port: int, aggregator: bool, demo: bool) -> int:
    ensure_free(host, port)
    # Imported here: the other commands never load the web stack.
    import uvicorn

    from service.api.app import create_app
    from service.api.context import build_context
    from service.api.events_route import front_door
    from service.gc_settings import tune_gc
    from service.store import migrate
    from service.store.engine import open_database

    with open_database(settings, create=True) as db:
        migrate.upgrade(db.engine)
        if db.admin_token is None:
            log.warning("no ETT_ADMIN_TOKEN set: only tokens from the token store can be used")
        ctx = build_context(settings, db.engine, admin_token=db.admin_token,
                            ingest_url=db.url, export_aggregates=aggregator)

        stop = threading.Event()
        background = _start_background(ctx, aggregator=aggregator, stop=stop)
        app = create_app(ctx)
        config = uvicorn.Config(app, host=host, port=port, log_level=settings.log_level.lower(),
                                access_log=False, timeout_graceful_shutdown=10)
        # The routes a fleet calls most are answered before the layers uvicorn puts around
        # the app (its proxy-headers middleware first), which they do not need.
        config.load()
        config.loaded_app = front_door(config.loaded_app, app.state.fast_routes)
        server = _server_class()(config)
        base = f"http://{host}:{port}"
        print(f"ETT telemetry listening on {base}", flush=True)
        if host in ("0.0.0.0", "::"):
            print(f"  reachable from other machines as http://{socket.getfqdn()}:{port}",
                  flush=True)
        print(f"  data: {db.describe()}" + (f" (in {settings.data_dir.resolve()})"
                                              if db.embedded else ""), flush=True)
        line = admin_token_line(settings, embedded=db.embedded, token=db.admin_token,
                                generated=db.admin_token_generated)
        if line:
            print(line, flush=True)
        print(f"  aggregator: {'on' if aggregator else 'off (API-only replica)'}", flush=True)
        print(f"  console: {base}/ui/ (sign in with a token)", flush=True)
        if demo:
            print("  demo fleet: back-filling 2 days, the paired benchmark and an annotated"
                  " roll-out, then live", flush=True)
        if demo:
            _start_demo(base, db.admin_token, stop)
        # uvicorn re-raises the signal that stopped it once it has drained; turning SIGTERM
        # into SystemExit lets the `finally` blocks stop the aggregator and the embedded DB.
        # uvicorn does not handle SIGHUP (a closed terminal): it is asked to drain and stop
        # as for SIGTERM, from its own loop (a SystemExit raised in the middle of the loop
        # could hang the shutdown), so the embedded PostgreSQL is never left behind.
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
        signal.signal(signal.SIGHUP, lambda _sig, frame: server.handle_exit(signal.SIGTERM, frame))
        tune_gc()
        try:
            # Ctrl-C is how `make run` is meant to stop: a clean stop, not a failure. uvicorn
            # raises it again once drained, to asyncio's own Ctrl-C handler, which it restored;
            # once in CI run() returned without it (exit 0, no traceback), a stop all the same.
            with contextlib.suppress(KeyboardInterrupt):
                server.run()
            print("ETT telemetry stopped", flush=True)
        finally:
            stop.set()
            for thread in background:
                thread.join(timeout=15)
            ctx.close()
    faulthandler.cancel_dump_traceback_later()
    return 0


def admin_token_line(settings: Settings, *, embedded: bool, token: str | None,
                     generated: bool) -> str | None:
    """The banner's admin-token line. A secret is printed only when it is first made (the
    one time nobody else could know it); a stored or configured one is named, not shown,
    and a file is named only where it exists."""
    if token is None:
        return None
    if settings.admin_token is not None:
        return "  admin token: from ETT_ADMIN_TOKEN (not shown)"
    path = settings.data_dir / "admin-token"
    if generated:
        return f"  admin token (generated, stored in {path}; shown only this once): {token}"
    if embedded and path.exists():
        return f"  admin token: stored in {path} (not shown again)"
    return None


def _exit_on_sigterm(_signum: int, _frame: object) -> None:
    raise SystemExit(0)


def _server_class() -> type:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, whose stop says where it hangs: a stop that takes longer than
        STOP_REPORT_S writes every thread's stack to stderr (the process keeps stopping)."""

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if not self.should_exit:
                faulthandler.dump_traceback_later(STOP_REPORT_S, exit=False)
            super().handle_exit(sig, frame)

    return Server


def _start_background(ctx: AppContext, *, aggregator: bool, stop: threading.Event
                     ) -> list[threading.Thread]:
    threads: list[threading.Thread] = []
    if aggregator and ctx.aggregator is not None:
        loop = threading.Thread(
            target=ctx.aggregator.run_loop,
            args=(ctx.settings.aggregate_interval_s, stop),
            name="ett-aggregator",
            daemon=True,
        )
        loop.start()
        threads.append(loop)
    return threads


def _start_demo(base_url: str, token: str | None, stop: threading.Event) -> threading.Thread | None:
    from service.demo.poster import DemoOptions, run_demo_in_background
    from service.demo.showcase import SHOWCASE_FAILURE_RATE, post_showcase

    if token is None:
        log.warning("demo: no admin token, cannot post the demo fleet")
        return None
    return run_demo_in_background(base_url, token, DemoOptions(
        days=2, live=True, failure_rate_per_hour=SHOWCASE_FAILURE_RATE), stop,
        after_backfill=post_showcase)


def _run(args: argparse.Namespace) -> int:
    return serve(args.settings, host=args.host, port=args.port, aggregator=not args.no_aggregator,
                 demo=args.demo)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("serve", help="run the API, the aggregator loop and /metrics")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on; 0.0.0.0 for trainers on other machines")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--no-aggregator", action="store_true",
                   help="API-only replica: no aggregation loop, only request metrics")
    p.add_argument("--demo", action="store_true",
                   help="post a simulated demo fleet through the API after start-up")
    p.set_defaults(func=_run)


# The port check: `ett serve`'s first step. Checked before the database starts, the
# aggregator runs or "listening" is printed, so a second `make run` changes nothing and
# says in one line who holds the port and how to stop it.
class PortInUse(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _listener_pids(port: int) -> list[int]:
    """Processes with a listening socket on `port` (Linux /proc; empty elsewhere)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                # state 0A is LISTEN; the local address ends in the port in hex.
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(fields[9])
    pids = []
    if not inodes:
        return pids
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (proc / "fd").iterdir():
                link = os.readlink(fd)
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    pids.append(int(proc.name))
                    break
    return pids


def _is_ett(host: str, port: int) -> bool:
    probe = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    try:
        with urllib.request.urlopen(f"http://{probe}:{port}/healthz", timeout=1) as resp:
            return json.loads(resp.read()) == {"status": "ok"}
    except (OSError, ValueError):
        return False


def describe_holder(host: str, port: int) -> str:
    pids = _listener_pids(port)
    what = "an ETT telemetry server" if _is_ett(host, port) else "another program"
    if pids:
        stop = f"stop it with `kill {' '.join(map(str, pids))}` (or Ctrl-C where it runs)"
        what += f" (pid {', '.join(map(str, pids))})"
    else:
        stop = "stop it (Ctrl-C where it runs)"
    return (f"port {port} on {host} is already in use by {what}: {stop}, or choose another"
            f" port: `make run PORT={port + 1}` / `ett serve --port {port + 1}`")


def ensure_free(host: str, port: int) -> None:
    """Raise PortInUse naming the holder when `host:port` cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # uvicorn sets SO_REUSEADDR too: a port in TIME_WAIT is free for it, and for us.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(describe_holder(host, port)) from None
            raise PortInUse(f"cannot listen on {host}:{port}: {exc.strerror}") from None
