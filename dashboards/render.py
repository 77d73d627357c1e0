"""Dashboards -> JSON documents (pure: returns data; `ett dashboards` writes the files)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as dash_m

from . import fleet, model, pipeline, team

# File name (without .json) -> builder. Order is the order of the docs.
BUILDERS: dict[str, Callable[[], dash_m.Dashboard]] = {
    "fleet": fleet.build,
    "team": team.build,
    "model": model.build,
    "pipeline": pipeline.build,
}


def to_json(dashboard: dash_m.Dashboard) -> dict[str, Any]:
    """The dashboard as plain JSON data, keys sorted so the committed files diff cleanly."""
    doc: dict[str, Any] = json.loads(json.dumps(dashboard, cls=JSONEncoder, sort_keys=True))
    return doc


def dump(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def build_all() -> dict[str, dict[str, Any]]:
    """{name: dashboard JSON} for every dashboard."""
    return {name: to_json(build()) for name, build in BUILDERS.items()}


def render_all() -> dict[str, str]:
    """{file name: file text} as committed under dashboards/json/."""
    return {f"{name}.json": dump(doc) for name, doc in build_all().items()}
