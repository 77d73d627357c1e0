"""What a newcomer sees on `make run`, in a real browser at 1280 and 1920 px: timeline lane
labels whole, axis labels that neither repeat nor overprint at any job length, durations in
ms for a sub-second job, charts spanning the selected window with the partial step marked,
a chart on each team page, breadcrumbs naming the thing, impact cells on one line.

It shares the served demo fleet of test_console_browser.py (the same module-scoped server).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tests.console.test_console_browser import CHROMIUM, SHOTS, served, sync_api

__all__ = ["served"]  # a fixture, shared
pytestmark = pytest.mark.slow
WIDTHS = (1280, 1920)


@pytest.fixture(scope="module")
def browser(served: Any) -> Any:
    from pathlib import Path

    if not Path(CHROMIUM).exists():
        pytest.skip("chromium is not installed (scripts/install-system-deps.sh)")
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture(params=WIDTHS, ids=[f"{w}px" for w in WIDTHS])
def page(request: Any, browser: Any, served: Any) -> Any:
    proc, _ = served
    context = browser.new_context(base_url=proc.url,
                                  viewport={"width": request.param, "height": 1000})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("console", lambda m: m.type == "error" and errors.append(m.text))
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.goto("/ui/login")
    pg.fill("input[name=token]", proc.token)
    pg.click("form.login button[type=submit]")
    pg.wait_for_url("**/ui/**")
    pg.width = request.param  # type: ignore[attr-defined]
    yield pg
    assert errors == []
    context.close()


def _go(page: Any, path: str, shot: str) -> None:
    response = page.goto(path)
    assert response is not None and response.status == 200, path
    page.wait_for_load_state("networkidle")
    page.screenshot(path=str(SHOTS / f"{shot}-{page.width}.png"), full_page=True)


# Boxes in the SVG's own units (its viewBox), so the checks hold at every page width.
_TIMELINE_BOXES = """() => {
  const svg = document.querySelector("svg.timeline");
  const box = (el) => { const b = el.getBBox(); return [b.x, b.y, b.width, b.height]; };
  return {
    width: svg.viewBox.baseVal.width,
    labels: [...svg.querySelectorAll(".lane-label")].map((el) => [el.textContent, ...box(el)]),
    bars: [...svg.querySelectorAll("rect.bar")].map((el) => box(el)),
    ticks: [...svg.querySelectorAll("text.tick")].map((el) => [el.textContent, ...box(el)]),
  };
}"""


@pytest.mark.parametrize("job_id", ["first-ms", "first-s", "example-1"])
def test_timeline_labels_and_axis_never_clip_repeat_or_overprint(page: Any, job_id: str
                                                                 ) -> None:
    _go(page, f"/ui/jobs/{job_id}", f"timeline-{job_id}")
    t = page.evaluate(_TIMELINE_BOXES)
    first_bar = min(b[0] for b in t["bars"])
    for text, x, _y, w, _h in t["labels"]:
        assert x >= 0 and x + w <= first_bar - 2, (text, x, w, first_bar)
    assert {lbl[0] for lbl in t["labels"]} >= {"attempt 0", "completed"}
    ticks = sorted(t["ticks"], key=lambda k: k[1])
    labels = [k[0] for k in ticks]
    assert len(labels) >= 2 and len(set(labels)) == len(labels), labels
    for (_, x0, _, w0, _), (_, x1, _, _, _) in itertools.pairwise(ticks):
        assert x0 + w0 + 4 <= x1, labels  # a gap between neighbours
    assert all(k[1] >= 0 and k[1] + k[3] <= t["width"] for k in ticks), ticks


def test_a_sub_second_job_reads_in_milliseconds(page: Any, served: Any) -> None:
    _go(page, "/ui/jobs/first-ms", "job-ms")
    summary = page.inner_text("dl.summary")
    assert "150 ms" in summary and "100 ms" in summary, summary
    assert "0.0 s" not in page.inner_text("main")
    crumbs = page.inner_text("p.crumbs")
    assert crumbs.endswith("job first-ms") and "model my_model" in crumbs


def test_charts_span_the_window_and_mark_the_partial_step(page: Any, served: Any) -> None:
    for window, seconds in (("1d", 86400), ("7d", 7 * 86400)):
        _go(page, f"/ui/?window={window}", f"fleet-{window}")
        assert page.locator(".chart .uplot").count() == 3
        spans = page.evaluate("""() => [...document.querySelectorAll('.chart')].map((el) =>
            [el.dataset.chart, el.uplot.scales.x.min, el.uplot.scales.x.max,
             el.uplot.series.map((s) => s.label)])""")
        series = page.evaluate("() => JSON.parse(document.getElementById('series').textContent)")
        assert series["end"] - series["start"] == seconds
        assert series["partial_from"] is not None and series["partial_from"] < series["end"]
        for chart, lo, hi, labels in spans:
            assert (lo, hi) == (series["start"], series["end"]), chart
            if chart == "lost":
                assert "effective_training" not in labels and "wasted_training" in labels
        assert "shaded as partial" in page.inner_text("section.charts")


def test_each_team_page_has_a_chart_and_breadcrumbs_name_it(page: Any, served: Any) -> None:
    _, api = served
    team = api.get("/v1/models").json()["models"][0]["team"]
    _go(page, f"/ui/teams/{team}", "team")
    assert page.locator(".chart .uplot").count() == 3
    assert page.inner_text("p.crumbs").endswith(f"team {team}")
    model = next(m["model"] for m in api.get("/v1/models").json()["models"] if m["team"] == team)
    _go(page, f"/ui/models/{model}", "model")
    assert page.inner_text("p.crumbs").endswith(f"model {model}")


def test_impact_cells_stay_on_one_line(page: Any, served: Any) -> None:
    _go(page, "/ui/impact?model=paired_*", "impact")
    wrapped = page.evaluate("""() => [...document.querySelectorAll('td.num, th.num')]
        .filter((td) => td.textContent.trim())
        .filter((td) => {
          const r = document.createRange(); r.selectNodeContents(td);
          const tops = new Set([...r.getClientRects()].map((x) => Math.round(x.top)));
          return tops.size > 1; })
        .map((td) => td.textContent.trim())""")
    assert wrapped == []


def test_the_api_docs_fetch_nothing_from_outside(browser: Any, served: Any) -> None:
    """The README says the docs' assets are local: /docs and /redoc request only the
    service, ReDoc's logo included."""
    proc, _ = served
    context = browser.new_context(base_url=proc.url, viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    outside: list[str] = []
    # data: and blob: URLs (ReDoc's worker) of the page itself are not requests out.
    pg.on("request", lambda r: r.url.startswith((proc.url, "data:", f"blob:{proc.url}"))
          or outside.append(r.url))
    for path in ("/docs", "/redoc"):
        assert pg.goto(path).status == 200
        pg.wait_for_load_state("networkidle")
    pg.wait_for_selector("text=API docs by Redocly")
    pg.screenshot(path=str(SHOTS / "redoc.png"))
    assert outside == []
    context.close()
