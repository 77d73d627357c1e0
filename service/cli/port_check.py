"""`ett serve`'s first step: is the port free? If not, say in one line who holds it.

Checked before the database starts, the aggregator runs or "listening" is printed, so a
second `make run` changes nothing and says how to stop the first one.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import urllib.request
from pathlib import Path


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
