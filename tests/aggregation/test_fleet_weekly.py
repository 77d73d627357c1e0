"""`fleet_weekly` holds exactly `fleet_daily` summed by UTC week (from Monday), through
first passes and revisions, and a window that reads whole weeks from it answers what the
hours it covers add up to."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from service.store import queries as q
from tests.factories import WEEKS_JOBS, post_all, revise_weeks_jobs, spec_example


def _weekly_from_daily(conn) -> list[tuple]:
    return [tuple(r) for r in conn.execute(text(
        "SELECT date_trunc('week', day, 'UTC'), model, team, component, phase, owner,"
        " sum(settled_gpu_us), sum(unsettled_gpu_us) FROM fleet_daily"
        " GROUP BY 1, 2, 3, 4, 5, 6 HAVING sum(settled_gpu_us) <> 0"
        " OR sum(unsettled_gpu_us) <> 0 ORDER BY 1, 2, 3, 4, 5, 6"))]


def _weekly(conn) -> list[tuple]:
    return [tuple(r) for r in conn.execute(text(
        "SELECT * FROM fleet_weekly WHERE settled_gpu_us <> 0 OR unsettled_gpu_us <> 0"
        " ORDER BY week, model, team, component, phase, owner"))]


def test_weekly_rows_are_the_daily_rows_summed_by_week_through_revisions(api, agg,
                                                                          db_engine) -> None:
    for job_id, model, base in WEEKS_JOBS:
        post_all(api, spec_example(job_id, model, base))
    agg.run_pass()
    with db_engine.connect() as conn:
        weeks = {r[0] for r in _weekly(conn)}
        assert _weekly(conn) == _weekly_from_daily(conn)
    assert len(weeks) == 5 and all(w.weekday() == 0 and w.hour == 0 for w in weeks)
    revise_weeks_jobs(api, 79)
    agg.run_pass()
    with db_engine.connect() as conn:
        assert _weekly(conn) == _weekly_from_daily(conn)


@pytest.mark.parametrize(("start", "end"), [
    # Whole weeks with ragged days, hours and minutes on both sides.
    (datetime(2026, 10, 21, 3, 41, 9, tzinfo=UTC), datetime(2026, 11, 19, 22, 13, tzinfo=UTC)),
    # Exactly two weeks, Monday to Monday.
    (datetime(2026, 10, 26, tzinfo=UTC), datetime(2026, 11, 9, tzinfo=UTC)),
    # Less than a whole week inside (Tuesday to the next Monday).
    (datetime(2026, 10, 27, tzinfo=UTC), datetime(2026, 11, 2, 5, tzinfo=UTC)),
])
def test_a_window_over_whole_weeks_is_the_sum_of_its_hours(api, agg, db_engine, start,
                                                           end) -> None:
    for job_id, model, base in WEEKS_JOBS:
        post_all(api, spec_example(job_id, model, base))
    agg.run_pass()
    with db_engine.connect() as conn:
        got = q.window_rows(conn, start, end, ["model", "phase"])
        # The truth, from the hours alone: hour-clipped segments for the edge hours, the
        # hourly rollup for the whole hours between.
        lo, hi = q.ceil_hour(start), q.floor_hour(end)
        hourly = {(r[0], r[1], r[2]): [int(r[3]), int(r[4])] for r in conn.execute(text(
            "SELECT model, phase, component, sum(settled_gpu_us), sum(unsettled_gpu_us)"
            " FROM fleet_hourly WHERE hour >= :lo AND hour < :hi GROUP BY 1, 2, 3"),
            {"lo": lo, "hi": hi})}
        for r in conn.execute(text(
                "SELECT model, phase, component, settled,"
                " (extract(epoch FROM least(end_at, :end) - greatest(start_at, :start))"
                " * 1000000)::bigint * gpus FROM segments"
                " WHERE hour IN (:h0, :h1) AND start_at < :end AND end_at > :start"
                " AND NOT (hour >= :lo AND hour < :hi)"),
                {"start": start, "end": end, "h0": q.floor_hour(start),
                 "h1": q.floor_hour(end), "lo": lo, "hi": hi}):
            cell = hourly.setdefault((r[0], r[1], r[2]), [0, 0])
            cell[0 if r[3] else 1] += int(r[4])
    want = {k: v for k, v in hourly.items() if v != [0, 0]}
    assert {(g["model"], g["phase"], g["component"]): [g["settled"], g["unsettled"]]
            for g in got if g["settled"] or g["unsettled"]} == want
    assert want  # the window holds jobs
