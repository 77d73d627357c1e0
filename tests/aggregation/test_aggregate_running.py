"""Passes over running jobs: the cached events and the partial rewrites of
`service.aggregation.running_job_cache` and `store.results.update_jobs` must store exactly
what a full recompute from nothing stores, and the recompute over processes of
`service.aggregation.recompute` exactly what one process does."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import text

from ett_core import Taxonomy
from service.aggregate import Aggregator
from service.aggregation.chunks import every_job
from service.aggregation.recompute import recompute_all
from service.settings import Settings
from service.store.result_rows import drain_pending
from tests.factories import BASE, demo_events, event, fixed, post_all, results_state, wipe_results

HOURS = 30
CUT = BASE + timedelta(hours=HOURS)  # the demo fleet's last event; jobs are mid-run here


def _running_jobs(engine) -> list[tuple[str, str, int]]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(
            "SELECT j.job_id, j.model, max(a.attempt) FROM jobs j JOIN attempts a USING (job_id)"
            " WHERE j.open GROUP BY j.job_id, j.model ORDER BY j.job_id"))]


def _from_nothing(engine, now, timeout_s: float) -> dict[str, list]:
    wipe_results(engine)
    Aggregator(engine, Taxonomy.default(), heartbeat_timeout_s=timeout_s,
               clock=fixed(now)).run_pass(recompute_all=True)
    return results_state(engine)


@pytest.mark.parametrize("timeout_s", [3 * 86400.0, 1200.0])
def test_passes_over_running_jobs_store_what_a_recompute_from_nothing_stores(
        api, db_engine, timeout_s) -> None:
    post_all(api, demo_events(hours=HOURS))
    agg = Aggregator(db_engine, Taxonomy.default(), heartbeat_timeout_s=timeout_s,
                     batch_jobs=4, clock=fixed(CUT))
    agg.run_pass()
    running = _running_jobs(db_engine)
    assert len(running) >= 3
    # Minutes apart, across hour boundaries and (with the short timeout) past the heartbeat
    # timeout; now and then one running job reports a phase or a heartbeat.
    for step, minutes in enumerate([1, 2, 9, 31, 62, 64, 125, 126]):
        now = CUT + timedelta(minutes=minutes)
        if step % 3 == 1:
            job, model, attempt = running[step % len(running)]
            post_all(api, [event("heartbeat", minutes - 0.5, base=CUT, job_id=job, model=model,
                                 attempt=attempt, attrs={"step": step})])
        agg.clock = fixed(now)
        agg.run_pass()
    assert agg.cache_stats()["hits"] > 0
    incremental = results_state(db_engine)
    assert incremental == _from_nothing(db_engine, now, timeout_s)


def test_a_job_another_aggregator_recomputed_is_not_taken_from_the_cache(
        api, db_engine) -> None:
    post_all(api, demo_events(models=4, hours=HOURS))
    timeout = 3 * 86400.0
    one = Aggregator(db_engine, Taxonomy.default(), heartbeat_timeout_s=timeout,
                     clock=fixed(CUT))
    two = Aggregator(db_engine, Taxonomy.default(), heartbeat_timeout_s=timeout,
                     clock=fixed(CUT + timedelta(minutes=5)))
    one.run_pass()
    job, model, attempt = _running_jobs(db_engine)[0]
    # An event `one` never sees in the queue: `two` consumes its queue row.
    post_all(api, [event("phase_start", 7, base=CUT, job_id=job, model=model, attempt=attempt,
                         phase="checkpoint_save")])
    two.run_pass()
    one.clock = fixed(CUT + timedelta(minutes=10))
    one.run_pass()
    assert one.cache_stats()["misses"] > 0
    assert results_state(db_engine) == _from_nothing(db_engine, CUT + timedelta(minutes=10),
                                                     timeout)


@pytest.mark.slow
def test_a_recompute_over_processes_equals_one_process(
        api, db_engine, database_url) -> None:
    post_all(api, demo_events(models=8, hours=HOURS))
    now = CUT + timedelta(minutes=3)
    one = _from_nothing(db_engine, now, 600.0)
    wipe_results(db_engine)
    # Small chunks: every worker takes several.
    settings = Settings(database_url=database_url, heartbeat_timeout_s=600.0,
                        recompute_batch_jobs=2)
    seen: list[tuple[int, int]] = []
    report = recompute_all(database_url, settings, 3, lambda d, t: seen.append((d, t)),
                           now=now)
    assert report.jobs_recomputed == len(one["jobs"]) and report.jobs_failed == 0
    assert seen and seen[-1][0] == seen[-1][1]
    assert results_state(db_engine) == one


def test_jobs_that_stop_running_leave_the_cache(api, db_engine) -> None:
    post_all(api, demo_events(models=3, hours=HOURS))
    mine = Aggregator(db_engine, Taxonomy.default(), heartbeat_timeout_s=1200.0,
                      clock=fixed(CUT))
    mine.run_pass()
    assert mine.cache_stats()["jobs"] > 0
    # Another aggregator finds every heartbeat timed out and closes the jobs; this one's
    # next pass no longer covers them (not open, nothing queued) and forgets them.
    later = CUT + timedelta(days=1)
    Aggregator(db_engine, Taxonomy.default(), heartbeat_timeout_s=1200.0,
               clock=fixed(later)).run_pass()
    assert _running_jobs(db_engine) == []
    mine.clock = fixed(later + timedelta(minutes=1))
    mine.run_pass()
    assert mine.cache_stats()["jobs"] == 0


def test_a_recompute_of_everything_reads_its_jobs_a_page_at_a_time(api, db_engine) -> None:
    # Pages of 5 jobs (batch_jobs=1), and chunks of one list dealt to two aggregators that
    # hold the team rollups back (as the processes of a recompute do), added at the end:
    # the same results as one page, every job once, and a progress bar that ends at the
    # job count.
    post_all(api, demo_events(models=4, hours=HOURS))
    now = CUT + timedelta(minutes=3)
    whole = _from_nothing(db_engine, now, 600.0)
    wipe_results(db_engine)
    seen: list[tuple[int, int]] = []
    report = Aggregator(db_engine, Taxonomy.default(), batch_jobs=1, clock=fixed(now)).run_pass(
        recompute_all=True, progress=lambda d, t: seen.append((d, t)))
    assert len(whole["jobs"]) > 10
    assert report.jobs_recomputed == len(whole["jobs"])
    assert seen[-1] == (len(whole["jobs"]), len(whole["jobs"]))
    assert results_state(db_engine) == whole
    wipe_results(db_engine)
    chunks = list(every_job(db_engine, 2))
    listed = [job for chunk in chunks for job in chunk]
    assert len(listed) == len(set(listed)) and set(listed) == {r[0] for r in whole["jobs"]}
    done = sum(Aggregator(db_engine, Taxonomy.default(), clock=fixed(now)).run_pass(
        recompute_all=True, chunks=iter(chunks[k::2]), hold_teams=True).jobs_recomputed
        for k in range(2))
    assert done == len(whole["jobs"])
    with db_engine.begin() as conn:
        drain_pending(conn)
    assert results_state(db_engine) == whole


def test_job_pages_cover_jobs_with_events_only_or_results_only(api, db_engine) -> None:
    from service.store.results import count_jobs, job_ids_after

    post_all(api, demo_events(models=3, hours=6))
    Aggregator(db_engine, Taxonomy.default(), clock=fixed(CUT)).run_pass()
    with db_engine.begin() as conn:
        pruned = conn.execute(text("SELECT min(job_id) FROM jobs")).scalar_one()
        conn.execute(text("DELETE FROM events WHERE job_id = :j"), {"j": pruned})
    post_all(api, [event("allocated", 1, job_id="zz-new", model="m-new", gpus=8)])
    with db_engine.connect() as conn:
        expected = {r[0] for r in conn.execute(text(
            "SELECT job_id FROM jobs UNION SELECT job_id FROM events"))}
        pages, after = [], ""
        while page := job_ids_after(conn, after, 3):
            assert len(page) <= 3
            pages.append(page)
            after = page[-1]
        assert count_jobs(conn) == len(expected)
    listed = [job for page in pages for job in page]
    assert set(listed) == expected and len(listed) == len(expected)  # each job once
    assert pruned in listed and "zz-new" in pages[-1]
