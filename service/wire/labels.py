"""Job labels (`attrs.labels` on `allocated`): the keys cohorts are selected by.

At most 16 string pairs, keys `[a-z_][a-z0-9_]{0,62}` (safe as a Prometheus or SQL name),
values at most 128 characters. A job's labels are the union over its attempts, a later
attempt winning a key (docs/model.md).
"""

from __future__ import annotations

import re
from typing import Any

LABEL_KEY_RE = re.compile(r"[a-z_][a-z0-9_]{0,62}")
MAX_LABELS = 16
MAX_LABEL_VALUE = 128


class LabelError(ValueError):
    """A label set broke the contract; the message names the key."""


def check_labels(value: Any, field: str = "attrs.labels") -> dict[str, str]:
    """Return the labels as given, or raise LabelError naming the offending key."""
    if not isinstance(value, dict):
        raise LabelError(f"{field}: must be a JSON object of string pairs")
    if len(value) > MAX_LABELS:
        raise LabelError(f"{field}: at most {MAX_LABELS} labels, got {len(value)}")
    for key, item in value.items():
        if not isinstance(key, str) or not LABEL_KEY_RE.fullmatch(key):
            raise LabelError(f"{field}: key {key!r} must match [a-z_][a-z0-9_]{{0,62}}")
        if not isinstance(item, str):
            raise LabelError(f"{field}.{key}: must be a string")
        if len(item) > MAX_LABEL_VALUE:
            raise LabelError(f"{field}.{key}: at most {MAX_LABEL_VALUE} characters")
    return value


def parse_selector(text: str, field: str = "label") -> tuple[str, str]:
    """`key:value` (the value may hold colons) -> (key, value), checked like a label."""
    key, sep, value = text.partition(":")
    if not sep:
        raise LabelError(f"{field}: expected key:value, got {text!r}")
    check_labels({key: value}, field)
    return key, value
