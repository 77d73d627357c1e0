"""The shared rollups hold exactly the rows they sum (the fleet's hours the jobs' rollup rows,
its days its hours; the team and model rollups of migration 0014 its label rows),
through passes, revisions and a recompute (one that holds the team rollups back
included); and every read that moved to them answers exactly what the fleet's rows
answer: `window_rows` without a model, `window_figures` by model and team (the windows by
model, team or none, the models overview, the /metrics ratios), `component_series`. The
fleet mixes weeks of jobs crossing midnights and Mondays, the demo fleet's teams and
owners, the scheduler's word (unreported time), a running job (time at risk) and
revisions that empty cells."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from service.aggregation.chunks import every_job
from service.results.windows import figure_groups, summarise
from service.store import queries as q
from service.store.state import RECOMPUTE_LOCK, release_session_lock, take_session_lock
from service.store.tables import MODEL_FIGURES
from tests.factories import (
    BASE,
    NOW,
    WEEKS_FIRST,
    WEEKS_JOBS,
    demo_events,
    event,
    post_all,
    revise_weeks_jobs,
    spec_example,
    ts,
    wipe_results,
)

WINDOWS = [
    (WEEKS_FIRST - timedelta(days=1), NOW),
    (datetime(2026, 10, 21, 3, 41, 9, tzinfo=UTC), datetime(2026, 11, 19, 22, 13, tzinfo=UTC)),
    (datetime(2026, 10, 26, tzinfo=UTC), datetime(2026, 11, 9, tzinfo=UTC)),
    (datetime(2026, 10, 27, tzinfo=UTC), datetime(2026, 11, 2, 5, tzinfo=UTC)),
    (BASE + timedelta(minutes=31), BASE + timedelta(minutes=50)),  # inside one hour
    (BASE + timedelta(minutes=31), BASE + timedelta(hours=3, minutes=10)),
    (BASE + timedelta(hours=2), BASE + timedelta(hours=30)),
    (NOW - timedelta(days=7), NOW),
    (NOW - timedelta(days=28), NOW),
    (NOW - timedelta(hours=1, minutes=20), NOW),
    (datetime(2026, 9, 1, tzinfo=UTC), datetime(2026, 9, 2, tzinfo=UTC)),  # nothing held
]


def sched(type_: str, minutes: float, **fields):
    return event(type_, minutes, attrs={"source": "scheduler", **fields.pop("attrs", {})},
                 **fields)


def _fleet(api, agg) -> None:
    for job_id, model, base in WEEKS_JOBS:
        post_all(api, spec_example(job_id, model, base))
    post_all(api, demo_events(models=4, hours=30))
    post_all(api, [
        # Nobody instrumented this one; the other's trainer fell silent: unreported time.
        sched("allocated", 0, job_id="u1", model="batch", team="eval", gpus=4,
              attrs={"queued_at": ts(-5)}),
        sched("released", 30, job_id="u1", model="batch", team="eval",
              attrs={"reason": "completed"}),
        sched("allocated", 0, job_id="s1", model="llama", team="llm", gpus=8),
        event("allocated", 1, job_id="s1", model="llama", team="llm", gpus=8),
        event("phase_start", 2, job_id="s1", model="llama", phase="training"),
        event("heartbeat", 3, job_id="s1", model="llama"),
        # Training now, no checkpoint yet: time at risk.
        event("allocated", 0, job_id="r1", model="llama", team="llm", gpus=16,
              base=NOW - timedelta(hours=3)),
        event("phase_start", 0, job_id="r1", model="llama", phase="training",
              base=NOW - timedelta(hours=3)),
        event("heartbeat", 0, job_id="r1", model="llama", base=NOW - timedelta(minutes=1))])
    agg.run_pass()
    # Revisions: the late checkpoint at the failure (minute 80) brings the job's
    # lost-progress cells to zero.
    revise_weeks_jobs(api, 80)
    agg.run_pass()


def _summed(conn) -> dict[str, list[tuple]]:
    """Each shared rollup, and the same recomputed from the rows it sums."""
    held = "settled_gpu_us + unsettled_gpu_us"
    figures = ", ".join([
        *(f"coalesce(sum({held}) FILTER (WHERE component = '{f.removesuffix('_gpu_us')}'), 0)"
          for f in MODEL_FIGURES[:-2]),
        "coalesce(sum(unsettled_gpu_us) FILTER (WHERE component = 'effective_training'), 0)",
        f"coalesce(sum({held}) FILTER (WHERE phase = 'unreported'), 0)"])
    out = {}
    for level, column in (("hourly", "hour"), ("daily", "day"), ("weekly", "week")):
        if level != "weekly":
            out[f"team_{level}"] = (
                f"SELECT * FROM team_{level} ORDER BY 1, 2, 3, 4, 5",
                f"SELECT {column}, team, component, phase, owner, sum(settled_gpu_us),"
                f" sum(unsettled_gpu_us) FROM fleet_{level} GROUP BY 1, 2, 3, 4, 5"
                " ORDER BY 1, 2, 3, 4, 5")
        out[f"model_{level}"] = (
            f"SELECT * FROM model_{level} ORDER BY 1, 2, 3",
            f"SELECT {column}, model, team, {figures} FROM fleet_{level} GROUP BY 1, 2, 3"
            " ORDER BY 1, 2, 3")
    # The fleet's own levels: its hours are the jobs' rollup rows summed, its days its
    # hours summed by UTC day, the settled totals the jobs' settled time (zero rows left
    # by revisions aside: they have no job rows to sum).
    sums = "sum(settled_gpu_us), sum(unsettled_gpu_us)"
    moved = "HAVING sum(settled_gpu_us) <> 0 OR sum(unsettled_gpu_us) <> 0"
    nonzero = "WHERE settled_gpu_us <> 0 OR unsettled_gpu_us <> 0"
    out["fleet_hourly"] = (
        f"SELECT * FROM fleet_hourly {nonzero} ORDER BY 1, 2, 3, 4, 5, 6",
        f"SELECT hour, model, team, component, phase, owner, {sums} FROM rollup_hourly"
        f" GROUP BY 1, 2, 3, 4, 5, 6 {moved} ORDER BY 1, 2, 3, 4, 5, 6")
    out["fleet_daily"] = (
        f"SELECT * FROM fleet_daily {nonzero} ORDER BY 1, 2, 3, 4, 5, 6",
        f"SELECT date_trunc('day', hour, 'UTC'), model, team, component, phase, owner, {sums}"
        f" FROM fleet_hourly GROUP BY 1, 2, 3, 4, 5, 6 {moved} ORDER BY 1, 2, 3, 4, 5, 6")
    out["settled_totals"] = (
        "SELECT * FROM settled_totals WHERE settled_gpu_us <> 0 ORDER BY 1, 2, 3, 4",
        "SELECT model, team, component, owner, sum(settled_gpu_us) FROM rollup_hourly"
        " GROUP BY 1, 2, 3, 4 HAVING sum(settled_gpu_us) <> 0 ORDER BY 1, 2, 3, 4")
    return {name: [[tuple(r) for r in conn.execute(text(sql))] for sql in pair]
            for name, pair in out.items()}


def test_the_shared_rollups_are_the_rows_they_sum(api, agg, db_engine) -> None:
    """The team and model rollups row for row, zero ones included (a summed row exists
    exactly when a fleet row it sums does), the fleet's levels and totals as the jobs' rows
    summed; through passes, revisions, and a recompute of everything."""
    _fleet(api, agg)
    with db_engine.connect() as conn:
        zeros = conn.execute(text(
            "SELECT count(*) FROM fleet_hourly WHERE settled_gpu_us = 0"
            " AND unsettled_gpu_us = 0")).scalar_one()
        for name, (kept, recomputed) in _summed(conn).items():
            assert kept == recomputed, name
            assert kept, name
    assert zeros, "a revision emptied some cells"
    wipe_results(db_engine)
    agg.run_pass(recompute_all=True)
    with db_engine.connect() as conn:
        for name, (kept, recomputed) in _summed(conn).items():
            assert kept == recomputed, name


def test_a_recompute_adds_the_team_rollups_it_held_back_when_it_ends_or_at_the_next_pass(
        api, agg, db_engine) -> None:
    """A recompute of everything holds the team rollups' deltas back, to write each team row
    once. Live passes meanwhile add their own deltas, from the recompute's rows, and leave
    the held ones alone while the recompute holds its lock; once the lock is free with
    deltas still held (the recompute stopped before adding them), the next pass adds them,
    and every rollup sums its rows again."""
    _fleet(api, agg)
    wipe_results(db_engine)
    with db_engine.connect() as recompute:
        assert take_session_lock(recompute, RECOMPUTE_LOCK)
        recompute.commit()
        agg.run_pass(recompute_all=True, chunks=every_job(db_engine, 4), hold_teams=True)
        # Live traffic: a job the recompute stored changes, and a new one arrives.
        job_id, model, base = WEEKS_JOBS[3]
        post_all(api, [
            event("checkpoint", 50, job_id=job_id, model=model, base=base,
                  attrs={"snapshot_ts": (base + timedelta(minutes=50)).isoformat()}),
            sched("allocated", 0, job_id="u2", model="batch", team="eval", gpus=2),
            sched("released", 90, job_id="u2", model="batch", team="eval",
                  attrs={"reason": "completed"})])
        agg.run_pass()
        with db_engine.connect() as conn:
            summed = _summed(conn)
            held = conn.execute(text("SELECT count(*) FROM team_pending")).scalar_one()
        assert held
        for name, (kept, recomputed) in summed.items():
            assert (kept == recomputed) != name.startswith("team_"), name
        # The recompute stops without adding them (the lock goes with its session; closing
        # the connection would free it only once the server has noticed).
        release_session_lock(recompute, RECOMPUTE_LOCK)
        recompute.commit()
        agg.run_pass()
    with db_engine.connect() as conn:
        for name, (kept, recomputed) in _summed(conn).items():
            assert kept == recomputed, name
        assert conn.execute(text("SELECT count(*) FROM team_pending")).scalar_one() == 0


@pytest.fixture
def fleet(api, agg, db_engine):
    _fleet(api, agg)
    return db_engine


def _sorted(rows: list[dict]) -> list[tuple]:
    return sorted(tuple(sorted(r.items())) for r in rows)


@pytest.mark.parametrize(("keys", "filters", "exclude"), [
    ([], {}, ()),
    (["team", "owner", "phase"], {}, ()),
    (["phase"], {"team": "llm"}, ()),
    (["owner"], {"team": ["ads", "feed"]}, ()),
    (["phase"], {"owner": "scheduler"}, ("effective_training",)),
    (["component", "team"], {"model": None, "team": None}, ()),
])
def test_a_window_without_a_model_reads_the_team_rollups_and_answers_the_same(
        fleet, keys, filters, exclude) -> None:
    with fleet.connect() as conn:
        for start, end in WINDOWS:
            old = q.window_rows(conn, start, end, keys, filters, exclude, rollup="fleet")
            new = q.window_rows(conn, start, end, keys, filters, exclude)
            assert _sorted(new) == _sorted(old), (start, end)
            assert new == q.window_rows(conn, start, end, keys, filters, exclude, rollup="team")


@pytest.mark.parametrize("filters", [
    {}, {"model": "llama", "team": None}, {"team": "llm"}, {"model": ["model-0", "batch"]},
    {"model": []}, {"team": "nobody"},
])
def test_a_window_by_model_team_or_nothing_reads_the_model_rollups_and_answers_the_same(
        fleet, filters) -> None:
    """The groups an answer is built from (`summarise` of the fleet's rows, what it was
    read from before): the same groups, the same integers."""
    with fleet.connect() as conn:
        for start, end in WINDOWS:
            for keys in ([], ["model"], ["team"], ["model", "team"]):
                figures = q.window_figures(conn, start, end, keys, filters)
                rows = q.window_rows(conn, start, end, [*keys, "phase"], filters,
                                     rollup="fleet")
                for key in (None, *keys):
                    assert figure_groups(figures, key) == summarise(rows, key), (start, end, key)
                assert len(figures) == len({tuple(r[k] for k in keys) for r in rows})


@pytest.mark.parametrize("filters", [{}, {"team": "llm"}, {"owner": "scheduler"},
                                     {"team": "nobody"}])
def test_a_chart_without_a_model_reads_the_team_rollups_and_draws_the_same(fleet,
                                                                           filters) -> None:
    with fleet.connect() as conn:
        for start, end in WINDOWS:
            for step in ("hour", "day"):
                first = q.floor_hour(start) if step == "hour" else q.floor_day(start)
                old = q.component_series(conn, first, end, step, filters, rollup="fleet")
                new = q.component_series(conn, first, end, step, filters)
                assert sorted(map(_key, new)) == sorted(map(_key, old)), (start, end, step)


def _key(row: dict) -> tuple:
    return row["at"], row["component"], row["held"], row["unsettled"]
