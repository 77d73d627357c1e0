"""`ett prune` keeps the fleet rollups and drops old per-job detail."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import text

from service.store.retention import prune
from tests.factories import NOW, fixed, post_all, spec_example


def test_prune_drops_old_jobs_but_windows_stay_the_same(api, app_context, db_engine) -> None:
    app_context.aggregator.clock = fixed()
    post_all(api, spec_example(job_id="old"))
    # Started 25 minutes before NOW and still within the heartbeat timeout: open.
    post_all(api, spec_example(job_id="running", base=NOW - timedelta(minutes=25))[:8])
    app_context.aggregator.run_pass()
    params = {"start": "2026-11-01T00:00:00Z", "end": "2026-11-02T00:00:00Z"}
    before = api.get("/v1/ett", params=params).json()
    jobs, events = prune(db_engine, timedelta(days=7), NOW)
    assert (jobs, events) == (1, 27)
    assert api.get("/v1/ett", params=params).json() == before
    assert api.get("/v1/jobs/old").status_code == 404
    with db_engine.connect() as conn:
        left = conn.execute(text("SELECT DISTINCT job_id FROM events")).scalars().all()
    assert left == ["running"]
