"""Checkpoint advice through the real API on a real PostgreSQL: events in, the aggregator,
`GET /v1/models/{model}/checkpoint-advice` and `ett advise checkpoints` out."""

from __future__ import annotations

import json
import math
import random
from datetime import UTC, datetime, timedelta

import pytest

from service.cli import main as ett_main
from tests.factories import BASE, interrupted_job
from tests.results.checkpoint_sim import Trainer, Truth, simulate_job

MIN = 60.0
WINDOW = {"start": "2026-10-31T00:00:00Z", "end": "2026-11-30T00:00:00Z"}


def post_all(api, events: list[dict], size: int = 5000) -> None:
    for i in range(0, len(events), size):
        r = api.post("/v1/events", json={"events": events[i:i + size]})
        assert r.status_code == 202 and not r.json()["rejected"], r.text[:2000]


def test_three_hand_worked_interruptions_give_the_advice_computed_by_hand(api) -> None:
    for k in range(3):
        post_all(api, interrupted_job(f"hand-{k}", "hand-model", 100 * k))
    api.post("/v1/aggregate")
    a = api.get("/v1/models/hand-model/checkpoint-advice", params=WINDOW).json()
    assert (a["model"], a["status"], a["reason"], a["interruptions"]) == (
        "hand-model", "ok", None, 3)
    # M = 3 * 55 / 3 = 55 min; d = 9 / 9 = 1 min; R = (36 - 21) / 3 = 5 min.
    assert a["mtbf_seconds"] == pytest.approx(55 * MIN)
    assert a["checkpoint_cost_seconds"] == pytest.approx(MIN)
    assert a["restart_overhead_seconds"] == pytest.approx(5 * MIN)
    # Young sqrt(2 * 1 * 55) = 10.488 min; Daly 10.488 * (1 + 0.0953/3 + 0.00909/9) - 1.
    young = math.sqrt(110)
    assert a["interval_seconds"]["observed"] == pytest.approx(10 * MIN)
    assert a["interval_seconds"]["young"] == pytest.approx(young * MIN)
    daly = young * (1 + math.sqrt(1 / 110) / 3 + (1 / 110) / 9) - 1
    assert a["interval_seconds"]["daly"] == pytest.approx(daly * MIN)
    # At 10 min: (1 - (5 + 5) / 55) / (1 + 1/10) = (9/11) / (11/10) = 90/121 = 0.7438.
    assert a["expected_ettr"]["observed"] == pytest.approx(0.74380, abs=1e-5)
    ettr_daly = (1 - (5 + daly / 2) / 55) / (1 + 1 / daly)
    assert a["expected_ettr"]["daly"] == pytest.approx(ettr_daly)
    assert a["lost_progress_per_failure_seconds"] == {"observed": pytest.approx(7 * MIN),
                                                      "expected": pytest.approx(5 * MIN)}
    # Held GPU-hours: 3 jobs * 55 min * 4 GPUs = 11 h over a 30-day window.
    assert a["projected_saving_gpu_hours_per_day"] == pytest.approx(
        (ettr_daly - 90 / 121) * 11 / 30, rel=1e-6)


def test_too_few_interruptions_or_no_checkpoints_say_why_and_are_never_an_error(api) -> None:
    post_all(api, interrupted_job("once", "rare-failures", 0))
    no_ckpt = [ev for k in range(3) for ev in interrupted_job(f"n{k}", "no-ckpt", 100 * k)
               if ev["type"] != "checkpoint"]
    post_all(api, no_ckpt)
    api.post("/v1/aggregate")
    rare = api.get("/v1/models/rare-failures/checkpoint-advice", params=WINDOW).json()
    assert rare["status"] == "insufficient_data" and "1 interruption" in rare["reason"]
    assert rare["interval_seconds"]["observed"] == pytest.approx(10 * MIN)
    assert rare["interval_seconds"]["daly"] is None
    assert rare["projected_saving_gpu_hours_per_day"] is None
    none = api.get("/v1/models/no-ckpt/checkpoint-advice", params=WINDOW).json()
    assert none["status"] == "insufficient_data"
    assert none["reason"] == "no durable checkpoints in the window"
    assert none["checkpoint_cost_seconds"] is None and none["interruptions"] == 3
    unknown = api.get("/v1/models/never-seen/checkpoint-advice", params=WINDOW).json()
    assert unknown["status"] == "insufficient_data" and "no attempts" in unknown["reason"]
    assert unknown["mtbf_seconds"] is None


def test_figures_come_from_the_attempts_that_started_in_the_window(api) -> None:
    for k in range(3):
        post_all(api, interrupted_job(f"w-{k}", "windowed", 100 * k))
    api.post("/v1/aggregate")
    # The third job's attempts start at BASE + 200 and + 245 min: outside a window ending
    # at BASE + 150 min, so only two interruptions remain.
    end = (BASE + timedelta(minutes=150)).isoformat()
    a = api.get("/v1/models/windowed/checkpoint-advice",
                params={"start": WINDOW["start"], "end": end}).json()
    assert a["interruptions"] == 2 and a["status"] == "insufficient_data"


@pytest.mark.parametrize(("params", "message"), [
    ({"start": "yesterday"}, "start"),
    ({"start": "2026-11-02T00:00:00Z", "end": "2026-11-01T00:00:00Z"}, "after start"),
])
def test_bad_windows_are_422_with_a_message(api, params, message) -> None:
    r = api.get("/v1/models/m/checkpoint-advice", params=params)
    assert r.status_code == 422 and message in r.json()["detail"]


def test_advice_needs_a_reader_token(api) -> None:
    r = api.get("/v1/models/m/checkpoint-advice", headers={"Authorization": ""})
    assert r.status_code == 401


def test_the_cli_lists_models_by_projected_saving_and_filters_them(api, database_url,
                                                                   monkeypatch, capsys) -> None:
    for k in range(3):
        post_all(api, interrupted_job(f"a-{k}", "llama-a", 100 * k))
    post_all(api, interrupted_job("b-0", "llama-b", 0))
    post_all(api, interrupted_job("c-0", "gpt-c", 0))
    api.post("/v1/aggregate")
    monkeypatch.setenv("ETT_DATABASE_URL", database_url)
    args = ["advise", "checkpoints", "--start", WINDOW["start"], "--end", WINDOW["end"]]
    assert ett_main([*args, "--json", "--model", "llama-*"]) == 0
    listed = json.loads(capsys.readouterr().out)["models"]
    # llama-a has advice and a saving, so it comes first; llama-b (one failure) after it.
    assert [(m["model"], m["team"], m["status"]) for m in listed] == [
        ("llama-a", "ckpt", "ok"), ("llama-b", "ckpt", "insufficient_data")]
    assert ett_main([*args, "--team", "nobody"]) == 0
    assert "no attempts started" in capsys.readouterr().out
    assert ett_main(args) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[0].split()[:3] == ["model", "team", "status"]
    assert "gpt-c: 1 interruption(s)" in table


def test_the_cli_rejects_a_window_that_ends_before_it_starts(database_url, monkeypatch,
                                                            capsys) -> None:
    monkeypatch.setenv("ETT_DATABASE_URL", database_url)
    code = ett_main(["advise", "checkpoints", "--start", "2026-11-02T00:00:00Z",
                     "--end", "2026-11-01T00:00:00Z"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.startswith("ett advise: end: must be after start"), captured.err


@pytest.mark.slow
def test_monte_carlo_jobs_measure_the_ett_the_formula_expects_and_recover_m_d_and_r(api):
    trainer = Trainer(tau_s=10 * MIN, d_s=MIN, post_s=2 * MIN, startup_s=2 * MIN,
                      mtbf_s=60 * MIN)
    rng, truth = random.Random(18), Truth()
    start = datetime(2026, 11, 1, tzinfo=UTC)
    for k in range(20):
        simulate_job(rng, trainer, f"mc-{k}", "mc-model", start + timedelta(minutes=k),
                     100 * 3600.0, truth)
    post_all(api, truth.events)
    assert api.post("/v1/aggregate").json()["jobs_failed"] == 0
    a = api.get("/v1/models/mc-model/checkpoint-advice", params=WINDOW).json()
    n = truth.interruptions
    assert a["status"] == "ok" and a["interruptions"] == n
    # What happened, exactly: M is held time per interruption.
    assert a["mtbf_seconds"] == pytest.approx(truth.held_us / 1e6 / n, rel=1e-9)
    assert a["lost_progress_per_failure_seconds"]["observed"] == pytest.approx(
        truth.lost_us / 1e6 / n, rel=1e-9)
    # Every full cycle trains exactly tau between snapshots.
    assert a["interval_seconds"]["observed"] == pytest.approx(trainer.tau_s)

    # M: failures are Poisson over held time except the post_s after a failure (a job that
    # is down cannot fail again), so E[M] = mtbf + post; H / N has relative sd 1/sqrt(N)
    # (N about 2,500 here: 2%); allow 4 sd.
    m_true = trainer.mtbf_s + trainer.post_s
    assert abs(a["mtbf_seconds"] / m_true - 1) <= 4 / math.sqrt(n)
    # d: a save cut by a failure adds its partial time without a durable checkpoint. The
    # chance a failure lands in a save is about d / (tau + d), costing d / 2 on average:
    # d_hat / d - 1 is about N d / (2 (tau + d) C) for C durable checkpoints; allow twice.
    bias_d = n * trainer.d_s / (2 * (trainer.tau_s + trainer.d_s) * truth.durable)
    assert 0 <= a["checkpoint_cost_seconds"] / trainer.d_s - 1 <= 2 * bias_d
    # R: a failure during a restart's startup cuts that startup short (chance startup / M,
    # losing half of it on average): R_hat falls short by at most about startup^2/(M R).
    shortfall = trainer.startup_s ** 2 / (trainer.mtbf_s * trainer.restart_s)
    assert 0 <= 1 - a["restart_overhead_seconds"] / trainer.restart_s <= 2 * shortfall

    # The measured ETT against the formula at the true parameters. Each failure costs
    # R + L with L about uniform on [0, tau]: over N Poisson failures the lost time has
    # variance N ((R + tau/2)^2 + tau^2/12), so ETT has sd sqrt(that) / H; allow 4 sd.
    held_s = truth.held_us / 1e6
    per_failure = (trainer.restart_s + trainer.tau_s / 2) ** 2 + trainer.tau_s ** 2 / 12
    sd = math.sqrt(n * per_failure) / held_s
    measured = api.get("/v1/ett", params={**WINDOW, "model": "mc-model"}).json()
    ett = measured["groups"][0]["ett_ratio"]
    assert ett == pytest.approx(truth.effective_us / truth.held_us, rel=1e-9)
    expected = (1 - (trainer.restart_s + trainer.tau_s / 2) / m_true) / (
        1 + trainer.d_s / trainer.tau_s)
    assert abs(ett - expected) <= 4 * sd, (ett, expected, sd)
    # And at the parameters the advice measured (what it reports as expected_ettr.observed).
    assert abs(ett - a["expected_ettr"]["observed"]) <= 4 * sd
