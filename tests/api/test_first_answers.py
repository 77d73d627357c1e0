"""What a newcomer's first requests get: strict query strings, empty answers that say why,
a home page and API docs that work without internet access."""

from __future__ import annotations

import re

import pytest

from tests.factories import spec_example


@pytest.fixture
def example(api) -> None:
    r = api.post("/v1/events", json={"events": spec_example()})
    assert r.json()["accepted"] == len(spec_example())
    assert api.post("/v1/aggregate").status_code == 200


WINDOW = {"start": "2026-11-01T00:00:00Z", "end": "2026-11-02T00:00:00Z"}


@pytest.mark.parametrize("path, bad, suggestion", [
    ("/v1/ett", "groupby", "group_by"),
    ("/v1/ett", "modle", "model"),
    ("/v1/teams/ads/bill", "strat", "start"),
    ("/v1/models", "team", None),
    ("/v1/jobs/job-1", "verbose", None),
])
def test_an_unknown_query_parameter_is_422_naming_the_valid_ones(api, path, bad, suggestion
                                                                ) -> None:
    r = api.get(path, params={bad: "team"})
    assert r.status_code == 422
    detail = r.json()["detail"]
    assert f"unknown query parameter '{bad}'" in detail
    if suggestion:
        assert f"did you mean '{suggestion}'?" in detail
    if path == "/v1/ett":
        assert detail.endswith("/v1/ett takes: start, end, model, team, group_by")


def test_post_aggregate_takes_no_query_parameters(api) -> None:
    r = api.post("/v1/aggregate", params={"recompute": "1"})
    assert r.status_code == 422 and "takes: none" in r.json()["detail"]


def test_known_parameters_still_answer_without_a_note(api, example) -> None:
    r = api.get("/v1/ett", params={**WINDOW, "group_by": "team"})
    assert r.status_code == 200
    body = r.json()
    assert "note" not in body
    # docs/model.md section 6: 160 held minutes of 8 GPUs, 90 of them effective.
    assert body["groups"][0]["key"] == "ads"
    assert body["groups"][0]["held_gpu_seconds"] == 160 * 60 * 8
    assert body["groups"][0]["ett_ratio"] == 0.5625


def test_an_unknown_model_or_team_answers_zeros_with_a_note(api, example) -> None:
    body = api.get("/v1/ett", params={**WINDOW, "model": "model-b"}).json()
    assert body["groups"][0]["held_gpu_seconds"] == 0 and body["groups"][0]["ett_ratio"] is None
    assert body["note"] == "no jobs matched model=model-b; known models: model-a"
    body = api.get("/v1/ett", params={**WINDOW, "team": "adz", "group_by": "model"}).json()
    assert body["groups"] == []
    assert body["note"].startswith("no jobs matched team=adz; known teams: ads")
    assert "unassigned" in body["note"]


def test_a_quiet_window_says_nothing_was_held(api, example) -> None:
    body = api.get("/v1/ett", params={"start": "2026-10-01T00:00:00Z",
                                      "end": "2026-10-02T00:00:00Z", "model": "model-a"}).json()
    assert body["note"].startswith("nothing was held in this window by the jobs that matched")
    assert "not counted yet: `ett aggregate` runs one" in body["note"]


def test_an_empty_bill_says_whether_the_team_is_known(api, example) -> None:
    body = api.get("/v1/teams/compilr/bill", params=WINDOW).json()
    assert body["lost_gpu_hours"] == 0
    assert body["note"].startswith("no time is owned by team compilr; known teams and owners:")
    assert "compiler" in body["note"] and "ads" in body["note"]
    known = api.get("/v1/teams/compiler/bill", params=WINDOW).json()
    # compilation 10 + 5 minutes on 8 GPUs = 2 GPU-hours.
    assert known["lost_gpu_hours"] == pytest.approx(2.0) and "note" not in known
    quiet = api.get("/v1/teams/compiler/bill", params={"start": "2026-10-01T00:00:00Z",
                                                       "end": "2026-10-02T00:00:00Z"}).json()
    assert quiet["note"] == "team compiler owns no lost time in this window"


def test_no_models_yet_is_said(api, db_engine) -> None:
    body = api.get("/v1/models").json()
    assert body["models"] == [] and body["note"].startswith("no jobs yet")


def test_the_home_page_leads_to_the_console(api) -> None:
    r = api.get("/", follow_redirects=False)
    assert r.status_code == 307 and r.headers["location"] == "/ui/"


def test_the_api_docs_load_their_assets_from_the_service(api) -> None:
    page = api.get("/docs")
    assert page.status_code == 200
    sources = re.findall(r"""(?:src|href)=["']([^"']+)["']""", page.text)
    assert sources, page.text
    for src in sources:
        assert not src.startswith(("http://", "https://", "//")), src
        if src.endswith((".js", ".css")):
            asset = api.get(src)
            assert asset.status_code == 200 and len(asset.content) > 1000, src
    assert "swagger-ui-bundle" in page.text
