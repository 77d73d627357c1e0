"""The CLI's other command groups; each module has `register(subparsers)`."""

from __future__ import annotations

from types import ModuleType


def modules() -> list[ModuleType]:
    from . import cli_aggregate, cli_alerts, cli_dashboards, cli_tokens, demo, retention

    return [cli_aggregate, cli_alerts, cli_dashboards, cli_tokens, demo, retention]
