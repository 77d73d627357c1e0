"""Ownership: a job's model and team are fixed by its first stored
event; a writer can never move another team's job or inject events into it. And a claim
binds only the claiming team: another team's events for that id go to
that team's own job, never refused or merged."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text

from ett_core import Taxonomy
from service.aggregate import Aggregator
from tests import factories
from tests.access.access_helpers import auth, post, token

# Writers may send only events within the ingest window (7 days).
RECENT = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(days=1)


def event(type_: str, minutes: float, **fields: Any) -> dict[str, Any]:
    return factories.event(type_, minutes, base=RECENT, **fields)


def spec_example(**fields: Any) -> list[dict[str, Any]]:
    return factories.spec_example(base=RECENT, **fields)



def job_models(engine, job_id: str) -> list[tuple[str, str | None]]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(
            "SELECT DISTINCT model, team FROM events WHERE job_id = :j ORDER BY 1, 2"),
            {"j": job_id})]


def test_a_writer_may_not_post_its_model_into_another_teams_job(client, db_engine) -> None:
    search = token(db_engine, "writer", "search", ("search*",))
    ads = token(db_engine, "writer", "ads", ("ads_*",))
    job = [e for e in spec_example(job_id="rank-1", model="search") if e["type"] != "failure"]
    for e in job:
        e.pop("team", None)
    job[0]["team"] = "search"
    assert post(client, search, job).json()["accepted"] == len(job)
    # The defect: the ads writer's own model, and a failure, into the search job.
    hostile = [event("heartbeat", 30, job_id="rank-1", model="ads_x"),
               event("failure", 31, job_id="rank-1", model="ads_x",
                     attrs={"cause": "user"}),
               event("heartbeat", 32, job_id="ads-own", model="ads_x")]
    r = post(client, ads, hostile)
    assert r.status_code == 202, r.text
    body = r.json()
    # Neither merged into the search job nor refused: the ads team's own job of that id.
    assert (body["accepted"], body["duplicates"], body["rejected"]) == (3, 0, [])
    assert body["moved"] == [{"index": 0, "job_id": "rank-1@ads"},
                             {"index": 1, "job_id": "rank-1@ads"}]
    # The writers' team-less events took their tokens' teams.
    assert set(job_models(db_engine, "rank-1")) == {("search", "search")}
    assert job_models(db_engine, "rank-1@ads") == [("ads_x", "ads")]
    # Retried, the same answer (nothing new stored, every event a duplicate).
    again = post(client, ads, hostile).json()
    assert (again["accepted"], again["duplicates"], again["rejected"]) == (0, 3, [])


def test_a_writer_of_the_same_team_may_not_move_its_job_to_another_model(client,
                                                                         db_engine) -> None:
    search = token(db_engine, "writer", "search", ("search*",))
    assert post(client, search, [event("heartbeat", 0, job_id="s-1", model="search")]
                ).json()["accepted"] == 1
    body = post(client, search, [event("heartbeat", 1, job_id="s-1", model="search_b")]).json()
    assert body["accepted"] == 0 and [x["index"] for x in body["rejected"]] == [0]
    assert "'s-1' belongs to model 'search' (team 'search')" in body["rejected"][0]["error"]


def test_a_squatted_job_id_does_not_stop_the_real_team(client, db_engine) -> None:
    """One heartbeat of the feed team's writer for a predictable scheduler id never gets
    the ads team's real job's later events rejected."""
    feed = token(db_engine, "writer", "feed", ("feed_*",))
    ads = token(db_engine, "writer", "ads", ("ads_*",))
    squat = post(client, feed, [event("heartbeat", 0, job_id="slurm-1000123",
                                      model="feed_squat")]).json()
    assert squat["accepted"] == 1
    real = [event("allocated", 10, job_id="slurm-1000123", model="ads_x", gpus=8),
            event("phase_start", 11, job_id="slurm-1000123", model="ads_x", phase="training"),
            event("released", 70, job_id="slurm-1000123", model="ads_x")]
    body = post(client, ads, real).json()
    assert (body["accepted"], body["rejected"]) == (3, [])
    assert {m["job_id"] for m in body["moved"]} == {"slurm-1000123@ads"}
    assert job_models(db_engine, "slurm-1000123@ads") == [("ads_x", "ads")]
    assert job_models(db_engine, "slurm-1000123") == [("feed_squat", "feed")]
    # The namespaced name cannot be squatted in turn: '@' is not a name a writer may send.
    pre = post(client, feed, [event("heartbeat", 1, job_id="other-9@ads", model="feed_x")])
    assert pre.json()["accepted"] == 0 and "job_id" in pre.json()["rejected"][0]["error"]


def test_an_event_id_is_a_duplicate_only_within_its_job(client, db_engine) -> None:
    """An id already stored in another team's job does not make a new event a silent
    duplicate (accepted 0, duplicates 1)."""
    feed = token(db_engine, "writer", "feed", ("feed_*",))
    ads = token(db_engine, "writer", "ads", ("ads_*",))
    first = event("heartbeat", 0, job_id="feed-1", model="feed_x")
    assert post(client, feed, [first]).json()["accepted"] == 1
    same_id = {**event("heartbeat", 5, job_id="ads-1", model="ads_x"),
               "event_id": first["event_id"]}
    body = post(client, ads, [same_id]).json()
    assert (body["accepted"], body["duplicates"]) == (1, 0)
    # And within one job, a retry is still a duplicate.
    body = post(client, ads, [same_id]).json()
    assert (body["accepted"], body["duplicates"]) == (0, 1)
    with db_engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM events WHERE event_id = :i"),
                            {"i": first["event_id"]}).scalar_one() == 2


def test_an_event_naming_another_team_goes_to_that_teams_job(client, db_engine) -> None:
    r = client.post("/v1/events", headers={"Authorization": "Bearer test-admin-token"},
                    json={"events": [event("allocated", 0, job_id="j", model="m", gpus=1,
                                           team="red"),
                                     event("heartbeat", 1, job_id="j", model="m", team="blue"),
                                     event("heartbeat", 2, job_id="j", model="m")]})
    body = r.json()
    assert (body["accepted"], body["rejected"]) == (3, [])
    assert body["moved"] == [{"index": 1, "job_id": "j@blue"}]
    assert set(job_models(db_engine, "j")) == {("m", None), ("m", "red")}
    assert job_models(db_engine, "j@blue") == [("m", "blue")]


def test_ownership_holds_on_the_copy_path_of_large_batches(client, db_engine) -> None:
    admin = {"Authorization": "Bearer test-admin-token"}
    client.post("/v1/events", headers=admin,
                json={"events": [event("heartbeat", 0, job_id="big", model="one")]})
    many = [event("heartbeat", i, job_id="big", model="two") for i in range(1, 50)]
    many += [event("heartbeat", i, job_id="big", model="one") for i in range(50, 60)]
    body = client.post("/v1/events", headers=admin, json={"events": many}).json()
    assert body["accepted"] == 10 and len(body["rejected"]) == 49
    assert job_models(db_engine, "big") == [("one", None)]
    _ = auth  # the shared helpers


def test_a_resent_id_with_other_content_is_another_event_not_a_duplicate(client,
                                                                          db_engine) -> None:
    """A re-sent id whose content differs (here another attempt at the same
    instant) is not a retry: it is stored under an id derived from its content."""
    admin = {"Authorization": "Bearer test-admin-token"}
    first = event("heartbeat", 0, job_id="re", model="m")
    again = {**first, "attempt": 1}
    for ev, accepted in ((first, 1), (first, 0), (again, 1), (again, 0)):
        body = client.post("/v1/events", headers=admin, json={"events": [ev]}).json()
        assert (body["accepted"], body["duplicates"]) == (accepted, 1 - accepted), ev
    with db_engine.connect() as conn:
        rows = conn.execute(text("SELECT attempt FROM events WHERE job_id = 're'"
                                 " ORDER BY attempt")).scalars().all()
    assert rows == [0, 1]


def test_a_writer_tokens_team_is_the_default_team_of_its_events(client, db_engine) -> None:
    """`ett tokens create --role writer --team ads`: an event naming no team is stored with
    the token's team, so the job is billed to ads, not `unassigned`."""
    ads = token(db_engine, "writer", "ads", ("ads_*",))
    one = [e for e in spec_example(job_id="ads-teamless", model="ads_new")
           if e["type"] != "failure"]
    for e in one:
        e.pop("team", None)
    assert post(client, ads, one).json()["accepted"] == len(one)
    assert job_models(db_engine, "ads-teamless") == [("ads_new", "ads")]
    # A model the taxonomy gives to another team keeps no team: the taxonomy decides.
    shared = [event("allocated", 0, job_id="shared-teamless", model="ads_shared", gpus=1)]
    assert post(client, ads, shared).json()["accepted"] == 1
    assert job_models(db_engine, "shared-teamless") == [("ads_shared", None)]
    # An admin token adds no team.
    admin = {"Authorization": "Bearer test-admin-token"}
    admin_job = [event("allocated", 0, job_id="admin-teamless", model="ads_new", gpus=1)]
    assert post(client, admin, admin_job).json()["accepted"] == 1
    assert job_models(db_engine, "admin-teamless") == [("ads_new", None)]
    Aggregator(db_engine, Taxonomy.default()).run_pass()
    job = client.get("/v1/jobs/ads-teamless", headers=admin).json()
    assert job["team"] == "ads"
