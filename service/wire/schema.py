"""JSON Schema of the v1 batch, for the OpenAPI document (clients, schemathesis)."""

from __future__ import annotations

from typing import Any

from .event import EVENT_TYPES, MAX_GPUS, MAX_INT32

_NAME = {"type": "string", "pattern": "^[A-Za-z0-9._:/-]{1,200}$"}


def openapi_components() -> dict[str, Any]:
    event = {
        "type": "object",
        "required": ["event_id", "ts", "job_id", "attempt", "model", "type"],
        "properties": {
            "event_id": {"type": "string", "format": "uuid"},
            "ts": {"type": "string", "format": "date-time"},
            "job_id": _NAME,
            "attempt": {"type": "integer", "minimum": 0, "maximum": MAX_INT32},
            "model": _NAME,
            "type": {"type": "string", "enum": sorted(EVENT_TYPES)},
            "phase": _NAME,
            "gpus": {"type": "integer", "minimum": 1, "maximum": MAX_GPUS},
            "team": _NAME,
            "rank": {"type": "integer", "minimum": 0, "maximum": MAX_INT32},
            "attrs": {"type": "object"},
        },
    }
    batch = {
        "type": "object",
        "required": ["events"],
        "properties": {
            "events": {"type": "array", "minItems": 1, "maxItems": 5000, "items": event}
        },
    }
    return {"Event": event, "Batch": batch}
