"""The console's own arithmetic: the timeline's geometry, a model's Level-1 summary and the
SLO burn, on worked examples checked by hand and Hypothesis properties."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.console.timeline import LABEL_W, WIDTH, layout
from service.results.jobs import level1
from service.results.slo_burn import team_burns
from service.slo.model import Slo, SloSpec, Tier

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def seg(attempt: int, start_min: float, end_min: float, phase: str = "training",
        component: str = "effective_training", settled: bool = True) -> dict:
    return {"attempt": attempt, "start_at": T0 + timedelta(minutes=start_min),
            "end_at": T0 + timedelta(minutes=end_min), "gpus": 8, "component": component,
            "phase": phase, "owner": "ads", "settled": settled}


def test_hour_clipped_pieces_of_one_phase_are_one_bar() -> None:
    # Training 50-130 min is stored as 50-60 and 60-120 and 120-130 (hour boundaries);
    # the lost progress after it stays a bar of its own.
    segments = [seg(0, 0, 50, "compilation", "compilation"), seg(0, 50, 60), seg(0, 60, 120),
                seg(0, 120, 130), seg(0, 130, 150, "lost_progress", "wasted_training")]
    marks = [{"attempt": 0, "ts": T0 + timedelta(minutes=150), "type": "failure",
              "attrs": {"cause": "infra"}}]
    t = layout([{"attempt": 0, "end_cause": "infra"}], segments, marks)
    (lane,) = t["lanes"]
    assert [b.phase for b in lane.bars] == ["compilation", "training", "lost_progress"]
    # 150 minutes over the 960 - 124 - 10 = 826 px drawing (rounded to 0.01 px).
    scale = (WIDTH - LABEL_W - 10) / (150 * 60)
    assert lane.bars[1].x == pytest.approx(LABEL_W + 50 * 60 * scale, abs=0.005)
    assert lane.bars[1].w == pytest.approx(80 * 60 * scale, abs=0.005)
    assert lane.bars[2].lost and not lane.bars[1].lost
    assert [(m.kind, m.x) for m in lane.marks] == [("failure", WIDTH - 10)]
    assert "failure (infra)" in lane.marks[0].title
    assert (lane.label, lane.cause) == ("attempt 0", "infra")
    # 150 minutes: a tick every 30 minutes, the date on the first only.
    assert [k["label"] for k in t["ticks"]] == ["11-01 00:00", "00:30", "01:00", "01:30",
                                                "02:00", "02:30"]


@pytest.mark.parametrize(("span_s", "first", "second"), [
    (0.15, "11-01 00:00:00.000", "00:00:00.050"),   # the README snippet's first job
    (4.0, "11-01 00:00:00", "00:00:01"),
    (300.0, "11-01 00:00", "00:01"),
    (3 * 86400.0, "11-01", "11-02"),
])
def test_axis_ticks_are_round_distinct_and_never_crowded(span_s, first, second) -> None:
    segments = [seg(0, 0, span_s / 60)]
    t = layout([{"attempt": 0, "end_cause": "completed"}], segments, [])
    labels = [k["label"] for k in t["ticks"]]
    assert labels[:2] == [first, second]
    assert 2 <= len(labels) <= 6 and len(set(labels)) == len(labels)
    xs = [k["x"] for k in t["ticks"]]
    # Ticks at least 120 px apart: a label (at most 18 characters of 10 px text) fits.
    assert all(b - a >= 120 for a, b in itertools.pairwise(xs)), xs


@given(st.floats(0.01, 40 * 86400), st.floats(0, 86400))
def test_ticks_stay_inside_the_drawing_at_any_job_length(span_s: float, offset_s: float
                                                          ) -> None:
    start = offset_s / 60
    t = layout([{"attempt": 0, "end_cause": "completed"}],
               [seg(0, start, start + span_s / 60)], [])
    labels = [k["label"] for k in t["ticks"]]
    assert 1 <= len(labels) <= 6 and len(set(labels)) == len(labels)
    assert all(LABEL_W - 0.01 <= k["x"] <= WIDTH - 10 + 0.01 for k in t["ticks"])


def test_a_stall_is_a_dotted_bar_of_its_own_inside_training() -> None:
    # docs/model.md section 24, the first worked example: training 0-61, stalled 61-90,
    # training 90-120.
    segments = [seg(0, 0, 61), seg(0, 61, 90, "stalled", "wasted_training"), seg(0, 90, 120)]
    (lane,) = layout([{"attempt": 0, "end_cause": "completed"}], segments, [])["lanes"]
    assert [(b.phase, b.stalled, b.lost) for b in lane.bars] == [
        ("training", False, False), ("stalled", True, False), ("training", False, False)]
    scale = (WIDTH - LABEL_W - 10) / (120 * 60)
    assert lane.bars[1].w == pytest.approx(29 * 60 * scale, abs=0.01)
    assert lane.bars[1].colour == "#c62828"  # wasted training's colour, dotted on top


def test_a_job_with_no_segments_has_an_empty_timeline() -> None:
    assert layout([], [], [])["lanes"] == []


@st.composite
def attempts_segments(draw: st.DrawFn) -> list[dict]:
    out, t = [], 0.0
    for attempt in range(draw(st.integers(1, 4))):
        for _ in range(draw(st.integers(1, 6))):
            d = draw(st.integers(1, 300))
            phase = draw(st.sampled_from(["training", "compilation", "lost_progress"]))
            out.append(seg(attempt, t, t + d, phase, "effective_training"))
            t += d
        t += draw(st.integers(0, 30))
    return out


@given(attempts_segments())
def test_bars_cover_each_attempts_time_exactly_once(segments: list[dict]) -> None:
    attempts = sorted({s["attempt"] for s in segments})
    t = layout([{"attempt": a, "end_cause": "completed"} for a in attempts], segments, [])
    assert [lane.attempt for lane in t["lanes"]] == attempts
    first = min(s["start_at"] for s in segments)
    last = max(s["end_at"] for s in segments)
    scale = (WIDTH - LABEL_W - 10) / max((last - first).total_seconds(), 0.001)
    for lane in t["lanes"]:
        total_s = sum((s["end_at"] - s["start_at"]).total_seconds()
                      for s in segments if s["attempt"] == lane.attempt)
        drawn = sum(b.w for b in lane.bars)
        # Bars are rounded to 0.01 px and at least 0.5 px wide.
        assert drawn == pytest.approx(total_s * scale, abs=0.51 * len(lane.bars))
        assert all(LABEL_W - 0.01 <= b.x <= WIDTH - 10 + 0.01 for b in lane.bars)


def test_a_models_level1_is_summed_over_its_jobs() -> None:
    rows = [
        # Job a: TTS 20 min, one infra failure recovered in 44 min (the worked example).
        {"job_id": "a", "tts_seconds": 1200.0, "nof": 1, "ttr_seconds": [2640.0],
         "ttr_causes": ["infra"]},
        # Job b: TTS 10 min, a preemption (30 min) and a user failure (20 min).
        {"job_id": "b", "tts_seconds": 600.0, "nof": 2, "ttr_seconds": [1800.0, 1200.0],
         "ttr_causes": ["preemption", "user"]},
        # Job c: has not reached training (no TTS yet), no failure.
        {"job_id": "c", "tts_seconds": None, "nof": 0, "ttr_seconds": [],
         "ttr_causes": []},
    ]
    l1 = level1(rows)
    assert l1["jobs"] == 3
    assert l1["mean_tts_seconds"] == 900.0  # (1200 + 600) / 2: c has no TTS yet
    assert l1["nof"] == 3
    assert l1["nof_by_cause"] == {"infra": 1, "user": 1, "preemption": 1, "lost": 0}
    assert l1["mean_ttr_seconds"] == 1880.0  # (2640 + 1800 + 1200) / 3
    assert level1([])["mean_tts_seconds"] is None and level1([])["mean_ttr_seconds"] is None


@given(st.lists(st.lists(st.floats(0, 1e6), max_size=4), max_size=6))
def test_mean_ttr_times_nof_is_the_sum_of_every_ttr(ttrs: list[list[float]]) -> None:
    rows = [{"job_id": str(i), "tts_seconds": None, "nof": len(t), "ttr_seconds": t,
             "ttr_causes": ["infra"] * len(t)} for i, t in enumerate(ttrs)]
    l1 = level1(rows)
    total = sum(sum(t) for t in ttrs)
    if l1["nof"]:
        assert l1["mean_ttr_seconds"] * l1["nof"] == pytest.approx(total)
        assert sum(l1["nof_by_cause"].values()) == l1["nof"]
    else:
        assert l1["mean_ttr_seconds"] is None


def _spec(*slos: Slo) -> SloSpec:
    return SloSpec(runbook_base_url="x", data_team="telemetry", absent_for_s=900,
                   burn_rate_source="test", max_burn_headroom=0.5,
                   tiers=(Tier("page", 3600, 300, 0.02), Tier("ticket", 21600, 1800, 0.05)),
                   quantile_windows=(), slos=slos)


def test_slo_burn_of_a_component_share_from_the_rollups(db_engine) -> None:
    from sqlalchemy import text

    now = datetime(2026, 11, 3, 12, 0, tzinfo=UTC)
    # One job, 8 GPUs, in the whole hour 11:00-12:00: 45 min effective, 15 min compilation
    # (settled). Compilation share = 15/60 = 0.25 in every window that holds the hour.
    with db_engine.begin() as conn:
        hour, day = now - timedelta(hours=1), datetime(2026, 11, 3, tzinfo=UTC)
        # The team rows are the same rows summed over models (one model here), as the
        # aggregator keeps them.
        rollups = (("fleet_hourly", "'m', 'ads'", hour), ("fleet_daily", "'m', 'ads'", day),
                   ("team_hourly", "'ads'", hour), ("team_daily", "'ads'", day))
        for component, minutes in (("effective_training", 45), ("compilation", 15)):
            gpu_us = 8 * minutes * 60 * 1_000_000
            for table, labels, at in rollups:
                conn.execute(text(
                    f"INSERT INTO {table} VALUES (:t, {labels}, :c, :c, 'compiler', :g, 0)"),
                    {"t": at, "c": component, "g": gpu_us})
        conn.execute(text(
            "INSERT INTO segments VALUES ('j', 1, :h, 0, :s, :e, 8, 'm', 'ads',"
            " 'compilation', 'compilation', 'compiler', true)"),
            {"h": now - timedelta(hours=1), "s": now - timedelta(minutes=15), "e": now})
    share = Slo(name="compilation-share", alert="EttComponentBudgetBurn",
                sli="component_share", team="compiler", description="d",
                absent_severity="ticket", period_s=7 * 86400, objective=0.97,
                component="compilation")
    fleet = Slo(name="fleet-ett", alert="EttFleetEttBudgetBurn", sli="fleet_ett",
                team="reliability", description="d", absent_severity="ticket",
                period_s=7 * 86400, objective=0.90)
    spec = _spec(share, fleet)
    (burn,) = team_burns(db_engine, spec, "compiler", now)
    # Budget 0.03; error 0.25 over 1 h -> burn 8.33x. Page tier factor: 0.02 * 7 d / 1 h =
    # 3.36; the 5-minute window holds only compilation (the last 15 min are compilation),
    # error 1.0 -> 33x > 3.36: it pages.
    assert burn.error == pytest.approx(0.25) and burn.burn == pytest.approx(0.25 / 0.03)
    assert burn.window == "1h" and burn.status == "page"
    # Over 7 days the same hour is all there is: 0.25 / 0.03 of the budget rate.
    assert burn.budget_used == pytest.approx(0.25 / 0.03)
    (ett,) = team_burns(db_engine, spec, "reliability", now)
    # Fleet ETT error = 1 - 45/60 = 0.25 over 1 h; budget 0.10 -> 2.5x, under the page
    # factor min(3.36, 0.5 / 0.10 = 5) = 3.36; ticket: 0.05 * 7 d / 6 h = 1.4, the 6 h
    # window 2.5x and the 30 min window (11:30-12:00 holds only the 15 min of
    # compilation segment, no effective time: error 1.0, 10x) both over: a ticket.
    assert ett.error == pytest.approx(0.25) and ett.burn == pytest.approx(2.5)
    assert ett.status == "ticket"
    assert team_burns(db_engine, spec, "nobody", now) == []


def test_a_saving_that_rounds_to_zero_from_below_reads_zero() -> None:
    from service.console.formats import hours

    # -0.04 GPU-hours a day (a model already near Daly's interval) is 0.0, not -0.0;
    # -0.06 is a real regression and keeps its sign.
    assert [hours(-0.04), hours(-0.06), hours(1234.56), hours(None)] == [
        "0.0", "-0.1", "1,234.6", "\u2013"]
