"""Every dashboard JSON against Grafana's own dashboard type, as a JSON Schema generated
from @grafana/schema (scripts/generate-grafana-schema.sh) for the Grafana that
docker-compose.yml runs. Grafana itself cannot run on the test machines (no image
registry, no Debian package), so this is the check that the files are dashboards Grafana
reads."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import jsonschema
import pytest

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((Path(__file__).parent / "schemas" / "grafana-dashboard.schema.json")
                    .read_text())
DASHBOARDS = sorted((REPO / "dashboards" / "json").glob("*.json"))
BUILTIN_DATASOURCES = {"grafana", "-- Grafana --"}


def _is_builtin(datasource: object) -> bool:
    if isinstance(datasource, dict):
        return datasource.get("type") in BUILTIN_DATASOURCES or datasource.get("uid") == "grafana"
    return datasource in BUILTIN_DATASOURCES


def _without_query_targets(dashboard: dict) -> tuple[dict, list[dict]]:
    """The type gives an annotation's `target` the built-in Grafana datasource's fields
    ("Only required/valid for the grafana datasource", its own description says); for
    any other datasource the target is that datasource's query, which the type leaves
    open, as it does a panel's `targets`. Those are taken out and returned."""
    doc = copy.deepcopy(dashboard)
    taken = []
    for annotation in doc.get("annotations", {}).get("list", []):
        if "target" in annotation and not _is_builtin(annotation.get("datasource")):
            taken.append(annotation.pop("target"))
    return doc, taken


def test_the_schema_is_for_the_grafana_the_compose_file_runs() -> None:
    compose = (REPO / "docker-compose.yml").read_text()
    version = re.search(r"image:\s*grafana/grafana:([\w.]+)", compose)
    assert version, "docker-compose.yml names no grafana/grafana image"
    assert SCHEMA["x-grafana-schema-version"] == version[1], (
        "regenerate: scripts/generate-grafana-schema.sh")


def test_there_are_dashboards() -> None:
    assert {p.stem for p in DASHBOARDS} >= {"fleet", "model", "team", "pipeline"}


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_the_dashboard_is_a_grafana_dashboard(path: Path) -> None:
    dashboard = json.loads(path.read_text())
    doc, query_targets = _without_query_targets(dashboard)
    errors = sorted(jsonschema.Draft7Validator(SCHEMA).iter_errors(doc), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:20])
    for target in query_targets:
        assert isinstance(target, dict) and target, f"{path.name}: an empty annotation query"


def test_the_schema_rejects_what_grafana_would_not_read() -> None:
    # The check has teeth: a panel whose gridPos is a string, a dashboard without its
    # required keys, an annotation built-in query without its fields.
    dashboard = json.loads(DASHBOARDS[0].read_text())
    validator = jsonschema.Draft7Validator(SCHEMA)
    broken = copy.deepcopy(dashboard)
    broken["panels"][0]["gridPos"] = "top left"
    assert list(validator.iter_errors(_without_query_targets(broken)[0]))
    assert list(validator.iter_errors({"title": "no schemaVersion"}))
    builtin = copy.deepcopy(dashboard)
    builtin["annotations"] = {"list": [{"name": "x", "enable": True, "iconColor": "red",
                                        "datasource": {"type": "grafana", "uid": "grafana"},
                                        "target": {"refId": "A"}}]}
    assert list(validator.iter_errors(_without_query_targets(builtin)[0]))
