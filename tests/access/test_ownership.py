"""Ownership (issue 15, defect 2): a job's model and team are fixed by its first stored
event; a writer can never move another team's job or inject events into it."""

from __future__ import annotations

from sqlalchemy import text

from ett_core import Taxonomy
from service.aggregate import Aggregator
from tests.access.test_access import auth, client, make_client, post, taxonomy_file, token
from tests.factories import event, spec_example

__all__ = ["client", "make_client", "taxonomy_file"]  # fixtures, shared


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
    assert body["accepted"] == 1 and body["duplicates"] == 0  # only its own job
    assert [x["index"] for x in body["rejected"]] == [0, 1]
    error = body["rejected"][0]["error"]
    assert "'rank-1'" in error and "'search'" in error and "'ads_x'" in error
    # The search writer's team-less events took its token's team.
    assert set(job_models(db_engine, "rank-1")) == {("search", "search")}
    # Retried, the same answer (nothing stored meanwhile, the valid one a duplicate).
    again = post(client, ads, hostile).json()
    assert (again["accepted"], again["duplicates"], len(again["rejected"])) == (0, 1, 2)


def test_a_later_event_may_not_name_another_team_for_the_job(client, db_engine) -> None:
    r = client.post("/v1/events", headers={"Authorization": "Bearer test-admin-token"},
                    json={"events": [event("allocated", 0, job_id="j", model="m", gpus=1,
                                           team="red"),
                                     event("heartbeat", 1, job_id="j", model="m", team="blue"),
                                     event("heartbeat", 2, job_id="j", model="m")]})
    body = r.json()
    assert body["accepted"] == 2
    assert [x["index"] for x in body["rejected"]] == [1]
    assert "team 'red'" in body["rejected"][0]["error"]
    assert "(team 'blue')" in body["rejected"][0]["error"]


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
