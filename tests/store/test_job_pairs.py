"""The (model, team) pairs of the stored jobs, read by stepping through the (team, model)
index, are exactly what a DISTINCT over every job gives, for the fleet and for each team."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import text

from service.store import queries as q
from tests.factories import BASE, fixed, post_all, spec_example

# A model under two teams, a team with several models, models with several jobs, and names
# whose order differs between bytes and the database's collation.
JOBS = [("j1", "b-model", "ads"), ("j2", "b-model", "ads"), ("j3", "a-model", "ads"),
        ("j4", "b-model", "Search"), ("j5", "c_model", "search"), ("j6", "C-model", "ads"),
        ("j7", "a-model", "feed"), ("j8", "a-model", "feed")]


def _job(job_id: str, model: str, team: str, k: int) -> list[dict]:
    events = spec_example(job_id=job_id, model=model, base=BASE + timedelta(hours=k))
    events[0]["team"] = team
    return events


def test_the_pairs_are_every_distinct_model_and_team_of_a_job(api, app_context,
                                                                  db_engine) -> None:
    app_context.aggregator.clock = fixed()
    for k, job in enumerate(JOBS):
        post_all(api, _job(*job, k))
    app_context.aggregator.run_pass()
    with db_engine.connect() as conn:
        def distinct(where: str = "true", **params: str) -> list[tuple[str, str]]:
            return [tuple(r) for r in conn.execute(text(
                f"SELECT DISTINCT model, team FROM jobs WHERE {where} ORDER BY model, team"),
                params)]

        assert len(distinct()) == 6
        assert q.models_and_teams(conn) == distinct()
        for team in ("ads", "Search", "search", "feed", "nobody"):
            assert q.models_and_teams(conn, team) == distinct("team = :t", t=team), team
