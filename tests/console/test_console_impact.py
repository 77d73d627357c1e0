"""The impact page over the real app and database: the paired demo's runs compared by label
and by period, every figure equal to `GET /v1/impact` and `GET /v1/whatif` for the
cohorts the page names."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi.testclient import TestClient

from ett_core.impact import OVERHEAD_TERMS
from ett_core.taxonomy import COMPONENTS
from service.demo import paired
from tests.console.console_helpers import Figures, as_number, post_all

SUMMARY = {"delta_ett_pp": ("delta_ett_pp",), "total_gpu_seconds": ("savings", "total_gpu_seconds"),
           "recovery_share": ("recovery_share",), "startup_direct": ("startup_credit", "direct"),
           "startup_cascade": ("startup_credit", "cascade"),
           "ttr_to_tts_reduction": ("ttr_to_tts_reduction",)}
COHORT = ("jobs", "running_excluded", "held_gpu_seconds", "effective_gpu_seconds", "ett_ratio",
          "nof", "mean_tts_seconds", "mean_ttr_seconds")


def _dig(doc: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def _same_figures(f: Figures, doc: dict[str, Any]) -> None:
    for field, path in SUMMARY.items():
        assert as_number(f.field(field)) == _dig(doc, path), field
    for side in ("baseline", "candidate"):
        for field in COHORT:
            assert as_number(f.cells("cohorts", field)[side]) == doc[side][field], (side, field)
    savings = doc["savings"]
    assert {k: as_number(v) for k, v in f.cells("by-term", "saved").items()} == savings["by_term"]
    assert {k: as_number(v) for k, v in f.cells("by-component", "saved").items()} == savings[
        "by_component"]
    for component in COMPONENTS:
        shown = f.cells("by-term-component", component)
        assert {t: as_number(shown[t]) for t in OVERHEAD_TERMS} == {
            t: savings["by_term_component"][t][component] for t in OVERHEAD_TERMS}


def _cohort_bounds(f: Figures) -> dict[str, str]:
    rows = {r["data-key"]: r for r in f.rows("cohorts")}
    return {"baseline_start": rows["baseline"]["data-start"],
            "baseline_end": rows["baseline"]["data-end"],
            "candidate_start": rows["candidate"]["data-start"],
            "candidate_end": rows["candidate"]["data-end"]}


def test_two_labels_show_the_apis_impact_and_whatif(api: TestClient, browser: TestClient) -> None:
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(days=6)
    post_all(api, [e for run in paired.paired_events(start) for e in run])
    assert api.post("/v1/aggregate").status_code == 200
    page = browser.get("/ui/impact?whatif_component=compilation&whatif_reduction=0.5")
    assert page.status_code == 200, page.text
    f = Figures(page.text)
    params = {**_cohort_bounds(f), "baseline_label": "variant:baseline",
              "candidate_label": "variant:optimized"}
    doc = api.get("/v1/impact", params=params).json()
    assert doc["baseline"]["jobs"] == doc["candidate"]["jobs"] == 6
    assert doc["delta_ett_pp"] > 0  # the optimized runs gain
    _same_figures(f, doc)
    whatif = api.get("/v1/whatif", params={
        "start": params["candidate_start"], "end": params["candidate_end"],
        "label": "variant:optimized", "component": "compilation", "reduction": 0.5}).json()
    assert as_number(f.cells("whatif", "ett_ratio")["now"]) == whatif["ett_ratio"]
    for way in ("direct", "cascade"):
        assert as_number(f.cells("whatif", "projected_ett_ratio")[way]) == whatif[
            "projected_ett_ratio"][way]
        assert as_number(f.cells("whatif", "gpu_seconds_saved")[way]) == whatif[
            "gpu_seconds_saved"][way]
    # A model glob and a team narrow both cohorts as on the API.
    one = browser.get("/ui/impact", params={"model": "paired_m1_*", "team": paired.TEAM})
    f = Figures(one.text)
    doc = api.get("/v1/impact", params={**params, "model": "paired_m1_*",
                                        "team": paired.TEAM}).json()
    assert doc["baseline"]["jobs"] == 1
    _same_figures(f, doc)


def test_two_periods_show_the_apis_impact(api: TestClient, browser: TestClient) -> None:
    # The baseline runs a week before the optimized ones.
    start = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    start -= timedelta(days=5)
    week_before = start - timedelta(days=7)
    post_all(api, [e for run in paired.paired_events(week_before) for e in run
                   if ".baseline" in e["job_id"]])
    post_all(api, [e for run in paired.paired_events(start) for e in run
                   if ".optimized" in e["job_id"]])
    assert api.post("/v1/aggregate").status_code == 200
    days = {"baseline_start": f"{week_before:%Y-%m-%d}", "baseline_end": f"{start:%Y-%m-%d}",
            "candidate_start": f"{start:%Y-%m-%d}",
            "candidate_end": f"{start + timedelta(days=3):%Y-%m-%d}"}
    page = browser.get("/ui/impact", params={"mode": "periods", **days})
    assert page.status_code == 200, page.text
    f = Figures(page.text)
    bounds = _cohort_bounds(f)
    assert bounds["baseline_start"] == week_before.isoformat()
    doc = api.get("/v1/impact", params=bounds).json()
    assert doc["baseline"]["jobs"] == doc["candidate"]["jobs"] == 6
    _same_figures(f, doc)
    # The labels of the paired demo hold for the same jobs: the same figures either way.
    by_label = api.get("/v1/impact", params={
        "baseline_start": bounds["baseline_start"], "candidate_end": bounds["candidate_end"],
        "baseline_label": "variant:baseline", "candidate_label": "variant:optimized"}).json()
    assert by_label["savings"] == doc["savings"]


def test_an_empty_cohort_shows_no_savings_and_bad_input_names_the_field(
        browser: TestClient) -> None:
    page = browser.get("/ui/impact")
    assert page.status_code == 200
    f = Figures(page.text)
    assert f.field("total_gpu_seconds") == "None" and "No savings" in page.text
    assert f.cells("cohorts", "jobs") == {"baseline": "0", "candidate": "0"}
    for query, words in (("mode=both", "mode: must be one of"),
                         ("baseline_label=variant", "baseline_label: expected key:value"),
                         ("mode=periods&baseline_start=yesterday",
                          "baseline_start: expected a day"),
                         ("mode=periods&candidate_start=2026-11-10&candidate_end=2026-11-09",
                          "candidate_end: must be after"),
                         ("whatif_component=effective_training", "whatif_component: must be"),
                         ("whatif_reduction=2", "whatif_reduction: must be between 0 and 1")):
        r = browser.get(f"/ui/impact?{query}")
        assert r.status_code == 422 and words in r.text, (query, r.text[-400:])


def test_an_annotation_links_to_the_week_before_against_the_week_after(
        api: TestClient, browser: TestClient) -> None:
    # The optimized runs start at the change, the baseline runs a week before it.
    change = datetime.now(UTC).replace(microsecond=0) - timedelta(days=6)
    post_all(api, [e for run in paired.paired_events(change - timedelta(days=6)) for e in run
                   if ".baseline" in e["job_id"]])
    post_all(api, [e for run in paired.paired_events(change + timedelta(minutes=1))
                   for e in run if ".optimized" in e["job_id"]])
    assert api.post("/v1/aggregate").status_code == 200
    r = api.post("/v1/annotations", json={"ts": change.isoformat(), "title": "compile cache",
                                          "tags": ["compilation"]})
    assert r.status_code == 201, r.text
    note = r.json()["id"]
    page = browser.get("/ui/impact")
    f = Figures(page.text)
    (row,) = f.rows("annotations")
    assert row["data-key"] == str(note) and "compile cache" in page.text
    link = next(a["href"] for t, a in f.elements if t == "a" and a.get("class") == "around")
    compared = browser.get(link.replace("&amp;", "&"))
    assert compared.status_code == 200, compared.text
    doc = api.get("/v1/impact", params={"around": note, "days": 7}).json()
    assert doc["baseline"]["jobs"] == doc["candidate"]["jobs"] == 6
    _same_figures(Figures(compared.text), doc)


def test_the_changes_listed_come_a_page_at_a_time(api: TestClient, browser: TestClient) -> None:
    # Unpaged, 2,000 posts would make this page 22 MB for every user.
    from service.console.impact import NOTES_PAGE

    start = datetime.now(UTC).replace(microsecond=0) - timedelta(days=20)
    made = [api.post("/v1/annotations", json={"ts": (start + timedelta(minutes=i)).isoformat(),
                                              "title": f"change {i}"}).json()["id"]
            for i in range(NOTES_PAGE + 5)]
    page = browser.get("/ui/impact")
    f = Figures(page.text)
    first = [int(r["data-key"]) for r in f.rows("annotations")]
    assert first == made[:NOTES_PAGE]
    link = next(a["href"] for t, a in f.elements if t == "a" and a.get("class") == "notes-next")
    rest = Figures(browser.get(link.replace("&amp;", "&")).text)
    assert [int(r["data-key"]) for r in rest.rows("annotations")] == made[NOTES_PAGE:]
    assert not [a for t, a in rest.elements if t == "a" and a.get("class") == "notes-next"]
