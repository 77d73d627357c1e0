"""`ett dashboards` writes exactly what the renderers return."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

pytest.importorskip("grafana_foundation_sdk")

from dashboards.render import render_all
from service.cli import dashboards as cli_dashboards


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ett")
    cli_dashboards.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_dashboards_command_writes_the_rendered_json(tmp_path: Path) -> None:
    args = parse(["dashboards", "--out", str(tmp_path), "--no-k8s"])
    assert args.func(args) == 0
    written = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert written == render_all()


def test_dashboards_command_defaults_to_the_committed_locations() -> None:
    args = parse(["dashboards"])
    assert args.out == Path("dashboards/json") and args.k8s is True
