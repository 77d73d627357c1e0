"""The CLI's other command groups; each module has `register(subparsers)`."""

from __future__ import annotations

from types import ModuleType


def modules() -> list[ModuleType]:
    found: list[ModuleType] = []
    return found
