"""The checkpoint-advice panel and page over the real app and database: every figure shown
equals `GET /v1/models/{model}/checkpoint-advice` for the window the page names."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.console.console_helpers import Figures, as_number, fleet_until_now, post_all
from tests.factories import spec_example

# data-field on the pages -> where the endpoint's answer holds it
FIELDS = {
    "interval_observed": ("interval_seconds", "observed"),
    "interval_daly": ("interval_seconds", "daly"),
    "ettr_observed": ("expected_ettr", "observed"),
    "ettr_daly": ("expected_ettr", "daly"),
    "saving": ("projected_saving_gpu_hours_per_day", None),
}
PANEL_ONLY = {
    "interval_young": ("interval_seconds", "young"),
    "lost_observed": ("lost_progress_per_failure_seconds", "observed"),
    "lost_expected": ("lost_progress_per_failure_seconds", "expected"),
    "mtbf_seconds": ("mtbf_seconds", None),
    "checkpoint_cost_seconds": ("checkpoint_cost_seconds", None),
    "restart_overhead_seconds": ("restart_overhead_seconds", None),
}


def _get(answer: dict[str, Any], where: tuple[str, str | None]) -> Any:
    outer, inner = where
    return answer[outer] if inner is None else answer[outer][inner]


@pytest.fixture
def fleet(api: TestClient) -> TestClient:
    # A day and a half of six models failing ten times as often as the demo's default:
    # enough interruptions for advice; the demo varies interval and save cost by model.
    post_all(api, fleet_until_now(models=6, hours=36, failure_rate_per_hour=0.15))
    # The worked example's one failure is too few for advice: a model that says why not.
    base = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=5)
    post_all(api, spec_example(job_id="example-1", model="model-example", base=base))
    assert api.post("/v1/aggregate").status_code == 200
    return api


def _endpoint(api: TestClient, model: str, start: str, end: str) -> dict[str, Any]:
    r = api.get(f"/v1/models/{model}/checkpoint-advice", params={"start": start, "end": end})
    assert r.status_code == 200, r.text
    return r.json()


def test_the_checkpoints_page_lists_every_model_with_the_endpoints_figures(
        fleet: TestClient, browser: TestClient) -> None:
    page = browser.get("/ui/checkpoints")
    assert page.status_code == 200, page.text
    f = Figures(page.text)
    start, end = f.window()
    assert f.field("advised") is not None
    rows = f.rows("checkpoints")
    models = {m["model"] for m in fleet.get("/v1/models").json()["models"]}
    assert {r["data-key"] for r in rows} == models
    statuses = set()
    savings = []
    for row in rows:
        model = row["data-key"]
        answer = _endpoint(fleet, model, start, end)
        assert row["data-status"] == answer["status"], model
        statuses.add(answer["status"])
        for field, where in FIELDS.items():
            shown = f.cells("checkpoints", field)[model]
            assert as_number(shown) == _get(answer, where), (model, field)
        assert f.cells("checkpoints", "interruptions")[model] == str(answer["interruptions"])
        assert f.cells("checkpoints", "reason")[model] == str(answer["reason"])
        savings.append(answer["projected_saving_gpu_hours_per_day"])
    # Largest saving first; models without one last.
    known = [s for s in savings if s is not None]
    assert known == sorted(known, reverse=True)
    assert savings[:len(known)] == known
    assert as_number(f.field("saving")) == pytest.approx(sum(known))
    assert "ok" in statuses, "the demo fleet should give at least one model advice"


def test_the_team_filter_keeps_only_that_teams_models(fleet: TestClient,
                                                      browser: TestClient) -> None:
    models = fleet.get("/v1/models").json()["models"]
    team = models[0]["team"]
    page = browser.get(f"/ui/checkpoints?team={team}")
    assert page.status_code == 200
    f = Figures(page.text)
    assert {r["data-key"] for r in f.rows("checkpoints")} == {
        m["model"] for m in models if m["team"] == team}
    nobody = browser.get("/ui/checkpoints?team=nobody")
    assert nobody.status_code == 200 and "No attempts of team nobody" in nobody.text
    assert browser.get("/ui/checkpoints?window=2y").status_code == 422


def test_the_model_page_panel_shows_the_endpoints_advice(fleet: TestClient,
                                                         browser: TestClient) -> None:
    listed = Figures(browser.get("/ui/checkpoints").text).rows("checkpoints")
    by_status = {r["data-status"]: r["data-key"] for r in reversed(listed)}
    # One model with advice (the largest saving) and one without: both forms of the panel.
    assert set(by_status) == {"ok", "insufficient_data"}
    for model in by_status.values():
        page = browser.get(f"/ui/models/{model}?window=30d")
        assert page.status_code == 200
        f = Figures(page.text)
        start, end = f.window()
        answer = _endpoint(fleet, model, start, end)
        (panel,) = [a for t, a in f.elements if t == "table" and a.get("class") == "advice"]
        assert panel["data-status"] == answer["status"]
        if answer["status"] == "ok":
            for field, where in {**FIELDS, **PANEL_ONLY}.items():
                assert as_number(f.field(field)) == _get(answer, where), field
        else:
            assert f.field("reason") == answer["reason"]
