"""Answers that pages read once for several parts equal the answers read one by one:
`ett_windows` against `ett_window` per grouping, a team's models overview against the
fleet's filtered to the team (a model posted under two teams included)."""

from __future__ import annotations

from datetime import timedelta

from service.results.windows import ett_window, ett_windows, models_overview
from tests.factories import BASE, NOW, post_all, spec_example


def _fleet(api) -> None:
    for i in range(6):
        post_all(api, spec_example(f"s-{i}", f"model-{i % 3}", BASE + timedelta(hours=7 * i)))
    # model-0 again, from another team's writer: its own job under team "feed".
    events = spec_example("s-x", "model-0", BASE + timedelta(days=2))
    events[0]["team"] = "feed"
    post_all(api, events)


def test_one_read_for_several_groupings_equals_one_read_each(api, agg, db_engine) -> None:
    _fleet(api)
    agg.run_pass()
    for start, end in ((BASE - timedelta(days=9), NOW), (BASE + timedelta(minutes=31), NOW),
                       (BASE - timedelta(days=40), BASE - timedelta(days=30))):
        for model, team in ((None, None), (None, "ads"), ("model-1", None)):
            shared = ett_windows(db_engine, start, end, ("none", "team", "owner", "model"),
                                 model, team)
            for group_by, answer in shared.items():
                assert answer == ett_window(db_engine, start, end, group_by, model, team)


def test_a_teams_overview_is_the_fleets_rows_of_that_team(api, agg, db_engine) -> None:
    _fleet(api)
    agg.run_pass()
    now = BASE + timedelta(days=3)
    fleet = models_overview(db_engine, now)["models"]
    assert {m["team"] for m in fleet if m["model"] == "model-0"} == {"ads", "feed"}
    for team in ("ads", "feed", "nobody"):
        assert models_overview(db_engine, now, team)["models"] == [
            m for m in fleet if m["team"] == team]


def test_without_notes_an_empty_window_has_the_same_figures_and_no_note(api, agg,
                                                                        db_engine) -> None:
    _fleet(api)
    agg.run_pass()
    start, end = BASE - timedelta(days=40), BASE - timedelta(days=30)
    for team in ("ads", "scheduler"):
        said = ett_window(db_engine, start, end, "none", None, team)
        quiet = ett_windows(db_engine, start, end, ("none",), None, team, notes=False)["none"]
        assert "note" in said and "note" not in quiet
        assert quiet == {k: v for k, v in said.items() if k != "note"}
