"""The console in a real browser (Debian's chromium through Playwright) against a real
`ett serve`: sign in, visit every page of a demo fleet, no console errors, the figures
shown equal the API's, the job timeline has a lane per attempt with the failure marked.

Screenshots of every page go to artifacts/console/ (CI keeps the folder as an artifact).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.demo import paired
from tests.conftest import REPO
from tests.console.console_helpers import as_number, first_job, fleet_until_now, post_all
from tests.factories import spec_example

pytestmark = pytest.mark.slow
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SHOTS = REPO / "artifacts" / "console"

sync_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="session")
def served(pg_server_url: str) -> Iterator[Any]:
    """A real `ett serve` holding a demo fleet of the last day and the worked example job
    (one per session: test_console_layout.py visits the same fleet)."""
    from tests.conftest import ServiceProcess, create_database

    proc = ServiceProcess(create_database(pg_server_url, "ett_console"))
    proc.start()
    with httpx.Client(base_url=proc.url, headers=proc.headers(), timeout=60) as api:
        post_all(api, fleet_until_now(models=6, hours=26))
        base = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=5)
        post_all(api, spec_example(job_id="example-1", model="model-example", base=base))
        # The README snippet's first job at its shortest (150 ms) and at a few seconds.
        for job_id, scale in (("first-ms", 1 / 60_000), ("first-s", 1 / 60)):
            post_all(api, first_job(job_id, base + timedelta(hours=1), scale))
        # The paired demo's baseline and optimized runs, for the impact page.
        paired_start = datetime.now(UTC).replace(microsecond=0) - timedelta(days=6)
        post_all(api, [e for run in paired.paired_events(paired_start) for e in run])
        assert api.post("/v1/aggregate").status_code == 200
        yield proc, api
    proc.stop()


@pytest.fixture(scope="module")
def page(served: Any) -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.skip("chromium is not installed (scripts/install-system-deps.sh)")
    SHOTS.mkdir(parents=True, exist_ok=True)
    proc, _ = served
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        context = browser.new_context(base_url=proc.url, viewport={"width": 1366, "height": 900})
        pg = context.new_page()
        pg.console_errors = []  # type: ignore[attr-defined]
        pg.on("console", lambda m: m.type == "error" and pg.console_errors.append(m.text))
        pg.on("pageerror", lambda e: pg.console_errors.append(str(e)))
        pg.goto("/ui/jobs/example-1")
        assert "/ui/login" in pg.url  # no session yet: sign-in first, then back
        pg.fill("input[name=token]", "wrong")
        pg.click("button[type=submit]")
        assert "not valid" in pg.inner_text("[role=alert]")
        pg.screenshot(path=str(SHOTS / "login.png"))
        pg.fill("input[name=token]", proc.token)
        pg.click("form.login button[type=submit]")
        pg.wait_for_url("**/ui/**")
        yield pg
        assert pg.console_errors == []
        browser.close()


def _visit(page: Any, path: str, shot: str) -> None:
    response = page.goto(path)
    assert response is not None and response.status == 200, path
    page.wait_for_load_state("networkidle")
    page.screenshot(path=str(SHOTS / f"{shot}.png"), full_page=True)
    assert page.console_errors == [], (path, page.console_errors)


def _value(page: Any, selector: str) -> float | None:
    return as_number(page.get_attribute(selector, "data-value"))


def test_the_fleet_page_draws_its_charts_and_shows_the_apis_figures(page: Any,
                                                                   served: Any) -> None:
    _, api = served
    _visit(page, "/ui/", "fleet")
    assert page.locator(".chart .uplot").count() == 3  # every chart drawn by uPlot
    span = page.locator("[data-start]")
    window = {"start": span.get_attribute("data-start"), "end": span.get_attribute("data-end")}
    total = api.get("/v1/ett", params=window).json()["groups"][0]
    assert _value(page, ".summary [data-field=held_gpu_seconds]") == total["held_gpu_seconds"]
    assert _value(page, ".summary [data-field=ett_ratio]") == total["ett_ratio"]
    teams = api.get("/v1/ett", params={**window, "group_by": "team"}).json()["groups"]
    for g in teams:
        row = f"table.teams tr[data-key='{g['key']}']"
        assert _value(page, f"{row} [data-field=held_gpu_seconds]") == g["held_gpu_seconds"]
        assert _value(page, f"{row} [data-field=at_risk_gpu_seconds]") == g["at_risk_gpu_seconds"]


def test_team_model_and_job_pages_follow_the_links(page: Any, served: Any) -> None:
    _, api = served
    _visit(page, "/ui/", "fleet")
    page.click("table.teams tbody tr:first-child a")
    page.wait_for_load_state("networkidle")
    team = page.url.rsplit("/", 1)[1]
    page.screenshot(path=str(SHOTS / "team.png"), full_page=True)
    models = [m for m in api.get("/v1/models").json()["models"] if m["team"] == team]
    assert page.locator("table.models tbody tr").count() == len(models) > 0
    page.click("table.models tbody tr:first-child a")
    page.wait_for_load_state("networkidle")
    page.screenshot(path=str(SHOTS / "model.png"), full_page=True)
    assert page.locator(".chart .uplot").count() == 3
    page.click("table.jobs tbody tr:first-child a")
    page.wait_for_load_state("networkidle")
    job_id = page.url.rsplit("/", 1)[1]
    job = api.get(f"/v1/jobs/{job_id}").json()
    assert page.locator("g.lane").count() == len(job["attempts"])
    assert _value(page, ".summary [data-field=held_seconds]") == job["held_seconds"]
    _visit(page, "/ui/teams/scheduler", "team-owner")
    assert page.locator("table.slos tr[data-key=scheduling-share]").count() == 1
    assert page.console_errors == []


def test_the_job_timeline_has_a_lane_per_attempt_with_the_failure_marked(
        page: Any, served: Any) -> None:
    _, api = served
    page.goto("/ui/")
    page.fill("input[name=job_id]", "example-1")
    page.press("input[name=job_id]", "Enter")
    page.wait_for_url("**/ui/jobs/example-1")
    page.wait_for_load_state("networkidle")
    page.screenshot(path=str(SHOTS / "job.png"), full_page=True)
    job = api.get("/v1/jobs/example-1").json()
    lanes = page.locator("svg.timeline g.lane")
    assert lanes.count() == len(job["attempts"]) == 2
    first, second = lanes.nth(0), lanes.nth(1)
    assert first.locator(".mark.failure").count() == 1
    assert "failure (infra)" in first.locator(".mark.failure title").text_content()
    assert first.locator(".mark.checkpoint").count() == 1
    assert first.locator("rect.lost-shade").count() == 1
    assert second.locator(".mark.failure").count() == 0
    for name in ("held_seconds", "effective_seconds", "ett_ratio"):
        assert _value(page, f".summary [data-field={name}]") == job[name]
    for component, seconds in job["components"].items():
        cell = f"table.components [data-key={component}]"
        assert _value(page, cell) == seconds
    assert _value(page, "table.level1 [data-field=mean_ttr_seconds]") == job["level1"][
        "mean_ttr_seconds"]


def test_the_checkpoint_advice_page_and_panel_show_the_endpoints_advice(
        page: Any, served: Any) -> None:
    _, api = served
    _visit(page, "/ui/", "fleet")
    page.click("header nav a:text('Checkpoint advice')")
    page.wait_for_url("**/ui/checkpoints")
    page.wait_for_load_state("networkidle")
    page.screenshot(path=str(SHOTS / "checkpoints.png"), full_page=True)
    span = page.locator("[data-start]")
    window = {"start": span.get_attribute("data-start"), "end": span.get_attribute("data-end")}
    rows = page.locator("table.checkpoints tbody tr[data-key]")
    models = [rows.nth(i).get_attribute("data-key") for i in range(rows.count())]
    assert set(models) == {m["model"] for m in api.get("/v1/models").json()["models"]}
    for model in models:
        advice = api.get(f"/v1/models/{model}/checkpoint-advice", params=window).json()
        row = f"table.checkpoints tr[data-key='{model}']"
        assert page.get_attribute(row, "data-status") == advice["status"]
        assert _value(page, f"{row} [data-field=saving]") == advice[
            "projected_saving_gpu_hours_per_day"]
        assert _value(page, f"{row} [data-field=interval_daly]") == advice[
            "interval_seconds"]["daly"]
    page.click("table.checkpoints tbody tr:first-child td:first-child a")
    page.wait_for_load_state("networkidle")
    assert "/ui/models/" in page.url and "window=30d" in page.url
    page.screenshot(path=str(SHOTS / "model-advice.png"), full_page=True)
    span = page.locator("[data-start]")
    window = {"start": span.get_attribute("data-start"), "end": span.get_attribute("data-end")}
    advice = api.get(f"/v1/models/{models[0]}/checkpoint-advice", params=window).json()
    assert page.get_attribute("table.advice", "data-status") == advice["status"]
    assert page.console_errors == []


def test_the_impact_page_compares_the_paired_runs_and_projects_a_whatif(
        page: Any, served: Any) -> None:
    _, api = served
    _visit(page, "/ui/", "fleet")
    page.click("header nav a:text('Impact')")
    page.wait_for_url("**/ui/impact")
    page.wait_for_load_state("networkidle")
    page.fill("form.impact input[name=model]", "paired_*")
    page.click("form.impact button[type=submit]")
    page.wait_for_load_state("networkidle")
    page.screenshot(path=str(SHOTS / "impact.png"), full_page=True)
    base = page.locator("table.cohorts tr[data-key=baseline]")
    cand = page.locator("table.cohorts tr[data-key=candidate]")
    params = {"baseline_start": base.get_attribute("data-start"),
              "baseline_end": base.get_attribute("data-end"),
              "candidate_start": cand.get_attribute("data-start"),
              "candidate_end": cand.get_attribute("data-end"), "model": "paired_*",
              "baseline_label": "variant:baseline", "candidate_label": "variant:optimized"}
    doc = api.get("/v1/impact", params=params).json()
    assert doc["candidate"]["jobs"] == 6
    assert _value(page, ".summary [data-field=delta_ett_pp]") == doc["delta_ett_pp"] > 0
    assert _value(page, ".summary [data-field=recovery_share]") == doc["recovery_share"]
    assert _value(page, ".summary [data-field=startup_cascade]") == doc["startup_credit"][
        "cascade"]
    for term, saved in doc["savings"]["by_term"].items():
        assert _value(page, f"table.by-term tr[data-key={term}] [data-field=saved]") == saved
    page.select_option("form.whatif select[name=whatif_component]", "compilation")
    page.fill("form.whatif input[name=whatif_reduction]", "0.9")
    page.click("form.whatif button[type=submit]")
    page.wait_for_load_state("networkidle")
    page.screenshot(path=str(SHOTS / "impact-whatif.png"), full_page=True)
    whatif = api.get("/v1/whatif", params={
        "start": params["candidate_start"], "end": params["candidate_end"], "model": "paired_*",
        "label": "variant:optimized", "component": "compilation", "reduction": 0.9}).json()
    assert _value(page, "table.whatif tr[data-key=cascade] [data-field=projected_ett_ratio]") == (
        whatif["projected_ett_ratio"]["cascade"])
    assert _value(page, "table.whatif tr[data-key=direct] [data-field=gpu_seconds_saved]") == (
        whatif["gpu_seconds_saved"]["direct"])
    assert page.console_errors == []
