"""The dashboards as Grafana would load them: SDK round-trip, uids, golden JSON, variables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("grafana_foundation_sdk")

from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models.dashboard import Dashboard

from dashboards.queries import iter_targets
from dashboards.render import build_all, render_all, to_json

REPO = Path(__file__).resolve().parents[2]
JSON_DIR = REPO / "dashboards" / "json"


@pytest.fixture(scope="module")
def docs() -> dict[str, dict]:
    return build_all()


def _sql_annotation_targets(doc: dict) -> tuple[dict, list]:
    """The doc without its annotations' SQL targets, and those targets.

    The SDK models an annotation's `target` as the built-in store's filter only (its own
    comment: "this should just be a normal query target"), so a SQL target does not
    survive `from_json`; Grafana reads it as a query of the annotation's datasource.
    """
    out = json.loads(json.dumps(doc))
    targets = [a.pop("target") for a in out.get("annotations", {}).get("list", [])
               if "rawSql" in (a.get("target") or {})]
    return out, targets


def test_every_dashboard_round_trips_through_the_sdk_models(docs: dict[str, dict]) -> None:
    register_default_plugins()
    for name, doc in docs.items():
        plain, targets = _sql_annotation_targets(doc)
        assert to_json(Dashboard.from_json(plain)) == plain, name
        assert all(t["refId"] and t["format"] == "table" for t in targets), name


def test_fleet_team_and_model_dashboards_draw_the_change_annotations(docs) -> None:
    for name in ("fleet", "team", "model"):
        _plain, targets = _sql_annotation_targets(docs[name])
        assert len(targets) == 1 and "FROM annotations" in targets[0]["rawSql"], name


def test_dashboard_uids_are_unique_and_stable(docs: dict[str, dict]) -> None:
    uids = [doc["uid"] for doc in docs.values()]
    assert len(set(uids)) == len(uids)
    assert sorted(uids) == ["ett-fleet", "ett-model", "ett-pipeline", "ett-team"]


def test_committed_json_equals_what_the_code_generates() -> None:
    rendered = render_all()
    committed = {p.name: p.read_text(encoding="utf-8") for p in JSON_DIR.glob("*.json")}
    assert committed.keys() == rendered.keys(), "run `ett dashboards`"
    for name, text in rendered.items():
        assert committed[name] == text, f"dashboards/json/{name} is stale: run `ett dashboards`"


def _panels(doc: dict) -> list[dict]:
    return [p for top in doc["panels"] for p in [top, *top.get("panels", [])]]


def test_panel_ids_are_unique_within_each_dashboard(docs: dict[str, dict]) -> None:
    for doc in docs.values():
        ids = [p["id"] for p in _panels(doc)]
        assert len(set(ids)) == len(ids), doc["uid"]


def test_every_panel_has_a_title_a_description_and_a_datasource_variable(
        docs: dict[str, dict]) -> None:
    for doc in docs.values():
        for p in _panels(doc):
            if p["type"] == "row":
                continue
            assert p.get("title") and p.get("description"), (doc["uid"], p.get("title"))
            assert p["datasource"]["uid"] in ("${datasource}", "${sql_datasource}")


def test_every_dashboard_offers_both_datasource_variables(docs: dict[str, dict]) -> None:
    for doc in docs.values():
        names = {v["name"]: v for v in doc["templating"]["list"]}
        assert names["datasource"]["query"] == "prometheus"
        assert names["sql_datasource"]["query"] == "grafana-postgresql-datasource"


@pytest.mark.parametrize(("name", "variables"), [
    ("fleet", {"team", "model"}), ("team", {"team"}), ("model", {"team", "model"}),
])
def test_team_and_model_variables_are_where_the_panels_use_them(
        docs: dict[str, dict], name: str, variables: set[str]) -> None:
    doc = docs[name]
    names = {v["name"] for v in doc["templating"]["list"]}
    assert variables <= names
    # A variable may also narrow another one ($team narrows the $model list).
    text = json.dumps([t for _, t in iter_targets(doc)] + doc["templating"]["list"])
    for v in variables:
        assert f"${v}" in text, f"{name} declares ${v} but nothing uses it"


def test_team_dashboard_takes_one_team_and_model_dashboard_one_model(
        docs: dict[str, dict]) -> None:
    team = {v["name"]: v for v in docs["team"]["templating"]["list"]}["team"]
    model = {v["name"]: v for v in docs["model"]["templating"]["list"]}["model"]
    assert not team.get("multi") and not model.get("multi")


def test_docs_describe_every_panel(docs: dict[str, dict]) -> None:
    text = (REPO / "docs" / "dashboards.md").read_text(encoding="utf-8")
    missing = [(doc["uid"], p["title"]) for doc in docs.values() for p in _panels(doc)
               if p["type"] != "row" and f"`{p['title']}`" not in text]
    assert not missing, f"not described in docs/dashboards.md: {missing}"


def test_the_impact_panels_name_the_engines_terms_and_components() -> None:
    from dashboards import impact_panels
    from ett_core import impact
    from ett_core.taxonomy import COMPONENTS

    assert impact_panels.OVERHEAD_TERMS == impact.OVERHEAD_TERMS
    assert impact_panels.STARTUP_COMPONENTS == impact.STARTUP_COMPONENTS
    assert impact_panels.COMPONENTS == COMPONENTS
