"""The console over the real app and database: sign-in, every page, figures equal the API's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from service.access.tokens import create_token, revoke_token
from service.api.app import create_app
from service.api.context import build_context
from service.settings import Settings
from tests.conftest import ADMIN_TOKEN
from tests.console.console_helpers import Figures, as_number, fleet_until_now, post_all, sign_in
from tests.factories import event, spec_example

PAGES = ("/ui/", "/ui/teams/ads", "/ui/models/model-a", "/ui/jobs/job-1", "/ui/search?job_id=x")


def test_root_redirects_to_the_console(api: TestClient) -> None:
    r = api.get("/", follow_redirects=False)
    assert r.status_code == 307 and r.headers["location"] == "/ui/"


@pytest.mark.parametrize("path", PAGES)
def test_every_page_without_a_session_redirects_to_sign_in(api: TestClient, path: str) -> None:
    # The bearer header the `api` client sends is not a console session.
    r = api.get(path, follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"].startswith("/ui/login?next=%2Fui%2F")


def test_a_bad_token_gets_a_message_and_no_cookie(api: TestClient) -> None:
    client = TestClient(api.app)
    r = sign_in(client, "not-a-token")
    assert r.status_code == 200
    assert "not valid" in r.text and "set-cookie" not in r.headers
    r = client.post("/ui/login", data={"token": ""}, follow_redirects=False)
    assert r.status_code == 200 and "Enter a token" in r.text
    assert client.get("/ui/", follow_redirects=False).status_code == 303


def test_a_valid_token_sets_an_httponly_samesite_strict_session_cookie(api: TestClient) -> None:
    client = TestClient(api.app)
    r = sign_in(client)
    assert r.status_code == 303 and r.headers["location"] == "/ui/"
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/ui" in cookie
    assert ADMIN_TOKEN not in r.headers["set-cookie"]  # the token stays on the server
    assert client.get("/ui/").status_code == 200


def test_sign_in_only_sends_back_to_console_paths(api: TestClient) -> None:
    client = TestClient(api.app)
    r = client.post("/ui/login", data={"token": ADMIN_TOKEN, "next": "https://evil.example/"},
                    follow_redirects=False)
    assert r.headers["location"] == "/ui/"
    client = TestClient(api.app)
    r = client.post("/ui/login", data={"token": ADMIN_TOKEN, "next": "/ui/jobs/j?x=1"},
                    follow_redirects=False)
    assert r.headers["location"] == "/ui/jobs/j?x=1"


def test_sign_out_ends_the_session(browser: TestClient) -> None:
    cookie = browser.cookies.get("ett_session")
    r = browser.post("/ui/logout", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui/login"
    replay = TestClient(browser.app, cookies={"ett_session": cookie})
    assert replay.get("/ui/", follow_redirects=False).status_code == 303


def test_a_revoked_tokens_session_stops_working(db_engine) -> None:
    settings = Settings(database_url="postgresql://unused", admin_token=ADMIN_TOKEN,
                        token_cache_ttl_s=0.001)
    ctx = build_context(settings, db_engine)
    with db_engine.begin() as conn:
        info, token = create_token(conn, "reader", note="console test")
    with TestClient(create_app(ctx)) as client:
        assert sign_in(client, token).status_code == 303
        page = client.get("/ui/")
        assert page.status_code == 200 and "reader" in page.text
        with db_engine.begin() as conn:
            revoke_token(conn, info.token_id)
        r = client.get("/ui/", follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].startswith("/ui/login")
        # The session is gone, not just refused once.
        assert client.get("/ui/", follow_redirects=False).status_code == 303
        again = sign_in(client, token)
        assert again.status_code == 200 and "not valid" in again.text
        assert "set-cookie" not in again.headers


def test_the_job_page_shows_the_apis_figures_and_a_lane_per_attempt(
        api: TestClient, browser: TestClient) -> None:
    base = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=4)
    post_all(api, spec_example(base=base))
    api.post("/v1/aggregate")
    job = api.get("/v1/jobs/job-1").json()
    page = browser.get("/ui/jobs/job-1")
    assert page.status_code == 200
    assert "default-src 'self'" in page.headers["content-security-policy"]
    f = Figures(page.text)
    for name in ("held_seconds", "effective_seconds", "at_risk_seconds", "ett_ratio"):
        assert as_number(f.field(name)) == job[name], name
    assert f.field("state") == job["state"] == "completed"
    for name in ("tts_seconds", "nof", "mean_ttr_seconds", "in_loop_overhead_seconds",
                 "final_shutdown_seconds"):
        assert as_number(f.field(name)) == job["level1"][name], name
    for component, seconds in job["components"].items():
        assert as_number(f.field("component", component)) == seconds, component
    lanes = [a for t, a in f.elements if t == "g" and "lane" in (a.get("class") or "")]
    assert [lane["data-attempt"] for lane in lanes] == ["0", "1"]
    # The worked example: attempt 0 fails (infra) at 80 min with 29 min of lost progress,
    # after the checkpoint durable at 52 min; attempt 1 completes.
    text = page.text
    lane0 = text.split('class="lane" data-attempt="1"', 1)[0]
    lane1 = text.split('class="lane" data-attempt="1"', 1)[1]
    assert lane0.count('class="mark failure"') == 1 and "failure (infra)" in lane0
    assert lane0.count('class="mark checkpoint"') == 1
    assert 'data-phase="lost_progress"' in lane0 and 'class="lost-shade"' in lane0
    assert 'class="mark failure"' not in lane1.split("</svg>")[0]  # the last lane


def test_unknown_and_pending_jobs_show_a_message(api: TestClient, browser: TestClient) -> None:
    r = browser.get("/ui/jobs/nope")
    assert r.status_code == 404 and "unknown" in r.text
    assert browser.get("/ui/search?job_id=a b", follow_redirects=False).headers[
        "location"] == "/ui/jobs/a%20b"
    assert browser.get("/ui/?window=2y").status_code == 422


def test_fleet_team_and_model_pages_show_the_apis_figures(
        api: TestClient, browser: TestClient) -> None:
    post_all(api, fleet_until_now(models=4, hours=20))
    api.post("/v1/aggregate")
    fleet = browser.get("/ui/?window=1d")
    assert fleet.status_code == 200
    f = Figures(fleet.text)
    start, end = f.window()
    window = {"start": start, "end": end}
    total = api.get("/v1/ett", params=window).json()["groups"][0]
    assert as_number(f.field("held_gpu_seconds")) == total["held_gpu_seconds"] > 0
    assert as_number(f.field("ett_ratio")) == total["ett_ratio"]
    teams = api.get("/v1/ett", params={**window, "group_by": "team"}).json()["groups"]
    shown = f.cells("teams", "held_gpu_seconds")
    assert {g["key"]: g["held_gpu_seconds"] for g in teams} == {
        k: as_number(v) for k, v in shown.items()}
    models = api.get("/v1/models").json()["models"]
    team = models[0]["team"]
    page = browser.get(f"/ui/teams/{team}")
    assert page.status_code == 200
    t = Figures(page.text)
    mine = {m["model"]: m["ett_ratio_7d"] for m in models if m["team"] == team}
    assert {k: as_number(v) for k, v in t.cells("models", "ett_ratio_7d").items()} == mine
    start, end = t.window()
    by_team = api.get("/v1/ett", params={"start": start, "end": end, "team": team}).json()
    assert as_number(t.field("held_gpu_seconds")) == by_team["groups"][0]["held_gpu_seconds"]
    for component, gpu_s in by_team["groups"][0]["components"].items():
        assert as_number(t.field("component", component)) == gpu_s
    model = models[0]["model"]
    page = browser.get(f"/ui/models/{model}?window=7d")
    assert page.status_code == 200
    m = Figures(page.text)
    start, end = m.window()
    mt = api.get("/v1/ett", params={"start": start, "end": end, "model": model}).json()
    assert as_number(m.field("held_gpu_seconds")) == mt["groups"][0]["held_gpu_seconds"]
    job_rows = m.rows("jobs")
    assert job_rows and browser.get(f"/ui/jobs/{job_rows[0]['data-key']}").status_code == 200


def test_an_owner_teams_page_shows_its_bill_and_slo_burn(api: TestClient,
                                                         browser: TestClient) -> None:
    post_all(api, fleet_until_now(models=4, hours=20))
    api.post("/v1/aggregate")
    # deploy/slo.yaml: the scheduler team owns the scheduling-share SLO and the phase.
    page = browser.get("/ui/teams/scheduler?window=1d")
    assert page.status_code == 200, page.text
    f = Figures(page.text)
    start, end = f.window()
    bill = api.get("/v1/teams/scheduler/bill", params={"start": start, "end": end}).json()
    assert as_number(f.field("lost_gpu_hours")) == bill["lost_gpu_hours"] > 0
    assert sum(bill["by_component"].values()) == pytest.approx(bill["lost_gpu_hours"])
    slos = f.rows("slos")
    assert [r["data-key"] for r in slos] == ["scheduling-share"]
    assert browser.get("/ui/teams/nobody").status_code == 404


def test_a_link_from_another_site_loads_the_page_once_more_to_get_the_cookie(
        browser: TestClient) -> None:
    # Browsers keep a SameSite=Strict cookie off a navigation that starts on another site.
    cross = {"sec-fetch-site": "cross-site"}
    stranger = TestClient(browser.app)
    r = stranger.get("/ui/jobs/j-1?x=1", headers=cross, follow_redirects=False)
    assert r.status_code == 200 and 'content="0; url=/ui/jobs/j-1?x=1"' in r.text
    # The reload is same-site: without a session it goes to sign-in (no loop) ...
    r = stranger.get("/ui/jobs/j-1?x=1", headers={"sec-fetch-site": "same-origin"},
                     follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/ui/login")
    # ... and with one the page shows.
    assert browser.get("/ui/jobs/j-1").status_code == 404  # unknown job, but signed in


def test_the_sign_in_page_sends_a_signed_in_user_on(browser: TestClient) -> None:
    r = browser.get("/ui/login?next=/ui/teams/ads", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui/teams/ads"


def test_the_package_ships_every_template_and_static_file() -> None:
    import tomllib

    from tests.conftest import REPO

    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["service"]
    console = REPO / "service" / "console"
    files = [p.relative_to(REPO / "service").as_posix()
             for d in ("templates", "static") for p in (console / d).rglob("*") if p.is_file()]
    assert files
    # Setuptools expands each pattern with glob from the package folder (`*` stays
    # within one folder).
    shipped = {p.relative_to(REPO / "service").as_posix()
               for g in globs for p in (REPO / "service").glob(g)}
    missing = [f for f in files if f not in shipped]
    assert missing == [], "add these to [tool.setuptools.package-data] in pyproject.toml"


def test_sign_in_when_the_token_store_cannot_answer_is_a_503_with_a_message() -> None:
    from service.store.engine import make_engine
    from tests.conftest import free_port

    # A real SQLAlchemy engine on a port where no PostgreSQL listens: the token store cannot tell.
    dead = make_engine(f"postgresql+psycopg://ett@127.0.0.1:{free_port()}/ett", pool_size=1)
    settings = Settings(database_url="postgresql://unused", admin_token=ADMIN_TOKEN)
    ctx = build_context(settings, dead, with_aggregator=False)
    client = TestClient(create_app(ctx))
    r = sign_in(client, "ett_some_stored_token")
    assert r.status_code == 503 and "Cannot sign in now" in r.text
    assert "set-cookie" not in r.headers
    # The bootstrap admin token needs no database.
    assert sign_in(client).status_code == 303
    dead.dispose()


def test_a_stall_is_drawn_dotted_on_the_job_timeline(api: TestClient,
                                                     browser: TestClient) -> None:
    # docs/model.md section 24, the first worked example: steps a minute, a 30-minute gap
    # from 60 to 90, so 61-90 is stalled.
    base = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=4)
    e = lambda t, m, **kw: event(t, m, job_id="hung", base=base, **kw)  # noqa: E731
    events = [e("allocated", 0, gpus=8, team="ads"), e("phase_start", 0, phase="training")]
    events += [e("heartbeat", m, attrs={"step": m}) for m in range(1, 61)]
    events += [e("heartbeat", m, attrs={"step": m - 29}) for m in range(90, 120)]
    events += [e("phase_end", 120, phase="training"), e("released", 120,
                                                         attrs={"reason": "completed"})]
    post_all(api, events)
    api.post("/v1/aggregate")
    assert api.get("/v1/jobs/hung").json()["phases"]["stalled"] == 29 * 60
    f = Figures(browser.get("/ui/jobs/hung").text)
    bars = [a for t, a in f.elements if t == "rect" and "bar" in (a.get("class") or "")
            .split()]
    assert [b["data-phase"] for b in bars] == ["training", "stalled", "training"]
    shades = [a for t, a in f.elements if t == "rect" and a.get("class") == "stalled-shade"]
    assert len(shades) == 1 and shades[0]["x"] == bars[1]["x"]
    assert shades[0]["fill"] == "url(#stalled)"
