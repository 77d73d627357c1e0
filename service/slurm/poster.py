"""Posting the scheduler's events, and a spool for when the service cannot be reached.

A hook must never fail or stall a job: one short attempt, and on any failure to deliver
the batch goes to the spool directory, which the next hook or `ett slurm sync` sends first.
Standard library only (urllib): the hook's start-up time is the job's.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_SPOOL = "/var/spool/ett-slurm"
_MAX_FLUSH_FILES = 50


@dataclass(frozen=True)
class Target:
    url: str
    token: str
    spool: Path
    timeout_s: float
    default_gpus: int


class ConfigError(Exception):
    """The adapter's settings are missing or malformed; the message names the variable."""


def target_from_env(env: Mapping[str, str]) -> Target:
    url = env.get("ETT_URL", "").strip()
    if not url.startswith(("http://", "https://")):
        raise ConfigError("ETT_URL: set it to the service's http(s):// address")
    token = env.get("ETT_TOKEN", "").strip()
    token_file = env.get("ETT_TOKEN_FILE", "").strip()
    if not token and token_file:
        try:
            token = Path(token_file).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"ETT_TOKEN_FILE: cannot read {token_file}: {exc.strerror}") from None
    if not token:
        raise ConfigError("ETT_TOKEN or ETT_TOKEN_FILE: an adapter token is needed")
    try:
        timeout_s = float(env.get("ETT_SLURM_TIMEOUT_S", "3"))
        default_gpus = int(env.get("ETT_SLURM_DEFAULT_GPUS", "1"))
    except ValueError as exc:
        raise ConfigError(f"ETT_SLURM_TIMEOUT_S / ETT_SLURM_DEFAULT_GPUS: {exc}") from None
    if default_gpus < 1 or not 0 < timeout_s <= 60:
        raise ConfigError("ETT_SLURM_DEFAULT_GPUS must be >= 1 and ETT_SLURM_TIMEOUT_S in (0, 60]")
    spool = Path(env.get("ETT_SLURM_SPOOL_DIR") or DEFAULT_SPOOL)
    return Target(url.rstrip("/"), token, spool, timeout_s, default_gpus)


class Undeliverable(Exception):
    """Worth retrying later: the service was unreachable, busy or failing."""


def post(target: Target, events: list[dict[str, Any]]) -> dict[str, Any]:
    """POST one batch; the 202 answer, or Undeliverable; a 4xx other than 429 raises ValueError
    (resending cannot help)."""
    request = urllib.request.Request(
        f"{target.url}/v1/events", data=json.dumps({"events": events}).encode(),
        headers={"Authorization": f"Bearer {target.token}", "Content-Type": "application/json"},
        method="POST")
    try:
        with urllib.request.urlopen(request, timeout=target.timeout_s) as response:
            return json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:300].decode(errors="replace")
        if exc.code == 429 or exc.code >= 500:
            raise Undeliverable(f"HTTP {exc.code}: {detail}") from None
        raise ValueError(f"HTTP {exc.code}: {detail}") from None
    except (OSError, ValueError) as exc:  # refused, timed out, DNS, a garbled answer
        raise Undeliverable(str(exc)) from None


def _spool_dir(target: Target) -> Path:
    for candidate in (target.spool, Path(tempfile.gettempdir()) / "ett-slurm-spool"):
        try:
            candidate.mkdir(parents=True, exist_ok=True, mode=0o700)
            return candidate
        except OSError:
            continue
    raise OSError("no writable spool directory")


def spool(target: Target, events: list[dict[str, Any]]) -> Path:
    directory = _spool_dir(target)
    path = directory / f"{time.time_ns()}-{os.getpid()}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"events": events}))
    tmp.replace(path)  # a half-written file is never read as a batch
    return path


def deliver(target: Target, events: list[dict[str, Any]], log: Callable[[str], None]) -> bool:
    """Send the spool's leftovers, then this batch; spool the batch if it cannot go now.
    True when it was delivered."""
    flush(target, log)
    try:
        answer = post(target, events)
    except Undeliverable as exc:
        where = spool(target, events)
        log(f"service unreachable ({exc}); spooled {len(events)} events to {where}")
        return False
    except ValueError as exc:
        log(f"service refused the batch: {exc}")
        return False
    for rejected in answer.get("rejected", []):
        log(f"event {rejected.get('index')} rejected: {rejected.get('error')}")
    return True


def flush(target: Target, log: Callable[[str], None]) -> int:
    """Send spooled batches, oldest first, until one fails to go; the count sent."""
    directory = target.spool
    if not directory.is_dir():
        fallback = Path(tempfile.gettempdir()) / "ett-slurm-spool"
        if not fallback.is_dir():
            return 0
        directory = fallback
    sent = 0
    for path in sorted(directory.glob("*.json"))[:_MAX_FLUSH_FILES]:
        try:
            events = json.loads(path.read_text())["events"]
            post(target, events)
        except Undeliverable:
            break
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log(f"dropping spooled batch {path.name}: {exc}")
        path.unlink(missing_ok=True)
        sent += 1
    return sent
