"""Rejected events are kept, never dropped silently: the dead-letter file.

An event the service refuses (listed in a 202 answer's ``rejected``, or a whole batch
answered 4xx) will never be accepted as sent, so it is not retried; instead it is appended
to ``rejected.jsonl`` beside the spool's segments (in the spool directory; the spool only
adopts ``ett-*.jsonl`` files), one JSON object a line::

    {"at": "2026-12-01T22:00:00+00:00", "status": 202, "error": "ts: ... older than ...",
     "event": {... the event as it was sent ...}}

so an operator can see what was lost and re-send it (with an admin token for a backfill).
The file is bounded (``max_bytes``; beyond it events are only counted). The service's
reason is logged once per distinct reason (numbers and quoted values set aside), not once
per event.
"""

from __future__ import annotations

import json
import os
import re
import threading
from datetime import UTC, datetime

from ett_client.errors import logger, warn_once

FILE_NAME = "rejected.jsonl"
MAX_BYTES = 64 << 20
_VARYING = re.compile(r"'[^']*'|\"[^\"]*\"|[0-9][0-9:.TZ+-]*")


def reason_key(error: str) -> str:
    """The error with its per-event values (numbers, instants, quoted names) set aside."""
    return _VARYING.sub("_", error)[:200]


class DeadLetters:
    """Appends rejected events to the file (or, for an in-memory spool, only counts)."""

    def __init__(self, directory: str | None, max_bytes: int = MAX_BYTES) -> None:
        self.path = None if directory is None else os.path.join(directory, FILE_NAME)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()

    def keep(self, lines: list[bytes], errors: list[str], status: int | None) -> int:
        """Append each line with its error; return how many were written to the file."""
        for error in errors:
            warn_once("rejected:" + reason_key(error),
                      "ett_client: the service rejected events (kept in %s, not retried): %s",
                      self.path or "no file: in-memory spool", error)
        if self.path is None or not lines:
            return 0
        at = datetime.now(UTC).isoformat()
        out = []
        for line, error in zip(lines, errors, strict=True):
            try:
                event = json.loads(line)
            except ValueError:
                event = line.decode("utf-8", "replace")
            out.append(json.dumps({"at": at, "status": status, "error": error,
                                   "event": event}, separators=(",", ":")) + "\n")
        data = "".join(out).encode()
        with self._lock:
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            except OSError as exc:
                warn_once("dead-letter-open", "ett_client: cannot write %s: %s", self.path, exc)
                return 0
            try:
                if os.fstat(fd).st_size + len(data) > self.max_bytes:
                    warn_once("dead-letter-full", "ett_client: %s is full (%d bytes); further"
                              " rejected events are only counted", self.path, self.max_bytes)
                    return 0
                os.write(fd, data)
            except OSError as exc:
                logger.warning("ett_client: writing %s failed: %s", self.path, exc)
                return 0
            finally:
                os.close(fd)
        return len(lines)
