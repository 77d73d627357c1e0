"""Events as the wire contract (docs/model.md section 5) defines them, built off the caller's
thread.

The caller's thread only captures a :data:`Record` tuple (timestamp, random id bytes, type,
phase, attrs, gpus); the spool thread turns records into JSON lines with :class:`Encoder`.
Validation happens on the caller's thread, before enqueueing, so a bad argument is reported
where it was made (and raised in strict mode) instead of surfacing later as a rejection.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from ett_client.clock import format_rfc3339_us
from ett_client.config import FAILURE_CAUSES, NAME_RE, Settings
from ett_client.errors import InvalidEventError

EVENT_TYPES = ("allocated", "released", "phase_start", "phase_end", "checkpoint", "failure",
               "heartbeat")
RELEASE_REASONS = ("completed", "failed", "preempted", "cancelled")
MAX_ATTRS_BYTES = 8 * 1024
MAX_REASON_CHARS = 1000

# (ts_us, event_id bytes, type, phase or None, attrs or None, gpus or None)
Record = tuple[int, bytes, str, str | None, dict[str, Any] | None, int | None]


def check_phase(phase: object) -> str:
    if not isinstance(phase, str) or not NAME_RE.match(phase):
        raise InvalidEventError(f"phase must be 1-200 characters of [A-Za-z0-9._:/-]: {phase!r}")
    return phase


def check_cause(cause: object) -> str:
    if cause not in FAILURE_CAUSES:
        raise InvalidEventError(f"failure cause must be one of {FAILURE_CAUSES}, got {cause!r}")
    return str(cause)


def check_release_reason(reason: object) -> str:
    if reason not in RELEASE_REASONS:
        raise InvalidEventError(f"release reason must be one of {RELEASE_REASONS}, got {reason!r}")
    return str(reason)


LABEL_KEY_RE = re.compile(r"[a-z_][a-z0-9_]{0,62}")
MAX_LABELS = 16
MAX_LABEL_VALUE = 128


def check_labels(labels: object) -> dict[str, str]:
    """A job's labels as the service accepts them (at most 16 string pairs, keys
    [a-z_][a-z0-9_]{0,62}, values at most 128 characters): checked here so a bad set is
    refused in the trainer, not one event later at the server."""
    if not isinstance(labels, dict) or len(labels) > MAX_LABELS:
        raise InvalidEventError(f"labels must be a dict of at most {MAX_LABELS} pairs")
    for key, value in labels.items():
        if not isinstance(key, str) or not LABEL_KEY_RE.fullmatch(key):
            raise InvalidEventError(f"label key {key!r} must match [a-z_][a-z0-9_]{{0,62}}")
        if not isinstance(value, str) or len(value) > MAX_LABEL_VALUE:
            raise InvalidEventError(f"label {key!r} must be a string of at most"
                                    f" {MAX_LABEL_VALUE} characters")
    return dict(labels)


def clip_reason(reason: object) -> str:
    text = str(reason)
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 3] + "..."


def event_id_from(raw: bytes) -> str:
    """Format 16 random bytes as a version-4 UUID (uuid4() without its object overhead)."""
    return str(uuid.UUID(bytes=raw, version=4))


class Encoder:
    """Turns records into wire events (dicts) and JSON lines, adding the per-recorder fields."""

    def __init__(self, settings: Settings) -> None:
        base: dict[str, Any] = {
            "job_id": settings.job_id,
            "attempt": settings.attempt,
            "model": settings.model,
        }
        if settings.team:
            base["team"] = settings.team
        if settings.all_ranks:
            base["rank"] = settings.rank
        self._base = base

    def event(self, record: Record) -> dict[str, Any]:
        ts_us, raw_id, type_, phase, attrs, gpus = record
        event: dict[str, Any] = {
            "event_id": event_id_from(raw_id),
            "ts": format_rfc3339_us(ts_us),
            "type": type_,
            **self._base,
        }
        if phase is not None:
            event["phase"] = phase
        if gpus is not None:
            event["gpus"] = gpus
        if attrs:
            event["attrs"] = attrs
        return event

    def line(self, record: Record) -> bytes:
        return json.dumps(self.event(record), separators=(",", ":")).encode() + b"\n"
