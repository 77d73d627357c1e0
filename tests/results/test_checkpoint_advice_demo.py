"""End to end on the demo fleet: every model either gets checkpoint advice or says why not."""

from __future__ import annotations

import itertools
from datetime import timedelta

from service.demo.fleet import CHECKPOINT_EVERY_S, FleetSpec, fleet_events, fleet_models
from tests.factories import BASE

WINDOW = {"start": "2026-10-31T00:00:00Z", "end": "2026-11-30T00:00:00Z"}


def test_demo_models_checkpoint_at_different_intervals_and_costs() -> None:
    models = fleet_models(FleetSpec(models=6))
    assert len({m.checkpoint_every_s for m in models}) == len(CHECKPOINT_EVERY_S)
    assert len({m.checkpoint_save_s for m in models}) > 1


def test_every_demo_model_gets_advice_or_says_why_not(api) -> None:
    # Failures ten times as often as the default, so most models see enough of them.
    spec = FleetSpec(models=6, seed=18, failure_rate_per_hour=0.15)
    cut = (BASE + timedelta(hours=40)).timestamp()
    events = [ev for t, ev in itertools.takewhile(lambda x: x[0] < cut, fleet_events(spec, BASE))]
    for i in range(0, len(events), 5000):
        assert api.post("/v1/events", json={"events": events[i:i + 5000]}).status_code == 202
    api.post("/v1/aggregate")
    advice = {m.name: api.get(f"/v1/models/{m.name}/checkpoint-advice", params=WINDOW).json()
              for m in fleet_models(spec)}
    for name, a in advice.items():
        assert a["status"] in ("ok", "insufficient_data"), name
        if a["status"] == "ok":
            assert a["interval_seconds"]["daly"] > 0 and a["expected_ettr"]["daly"] > 0, name
        else:
            assert a["reason"], name
    ok = {name: a for name, a in advice.items() if a["status"] == "ok"}
    assert len(ok) >= 3, {n: a["reason"] for n, a in advice.items()}
    # The habits differ, so the measured intervals and the advice differ between models.
    observed = {round(a["interval_seconds"]["observed"]) for a in ok.values()}
    assert len(observed) >= 3, observed
    assert len({round(a["interval_seconds"]["daly"]) for a in ok.values()}) == len(ok)


# The statement checkpoint advice read before round 3 (docs/performance.md): one sort of
# each model's attempts by start for its latest team, one function scan per attempt for
# its intervals. The one it reads now must give the same rows.
_BEFORE = """
    WITH s AS (
        SELECT model, (array_agg(team ORDER BY started_at DESC))[1] AS team,
               sum(held_us) AS held_us, sum(held_us::numeric * gpus) AS held_gpu_us,
               count(*) FILTER (WHERE interrupted) AS interruptions,
               sum(blocking_save_us) AS blocking_save_us,
               sum(durable_checkpoints) AS durable_checkpoints,
               coalesce(sum(ttr_us) FILTER (WHERE interrupted), 0) AS ttr_us,
               coalesce(sum(lost_progress_us) FILTER (WHERE interrupted), 0) AS lost_us
        FROM checkpoint_attempts WHERE started_at >= :start AND started_at < :end {f}
        GROUP BY model
    ), med AS (
        SELECT model, percentile_cont(0.5) WITHIN GROUP (ORDER BY i) AS median_us
        FROM checkpoint_attempts, unnest(intervals_us) AS i
        WHERE started_at >= :start AND started_at < :end {f}
        GROUP BY model
    )
    SELECT s.*, med.median_us FROM s LEFT JOIN med ON med.model = s.model ORDER BY s.model
"""


def test_the_advice_sums_are_those_of_the_statement_before(api, db_engine) -> None:
    """Six models, one of them under a second team later (its latest team is the later
    one), windows that cut attempts in and out; by model and for every model."""
    from sqlalchemy import text

    from service.store.queries import checkpoint_sums

    spec = FleetSpec(models=6, seed=18, failure_rate_per_hour=0.15)
    cut = (BASE + timedelta(hours=40)).timestamp()
    events = [ev for t, ev in itertools.takewhile(lambda x: x[0] < cut, fleet_events(spec, BASE))]
    name = fleet_models(spec)[0].name
    late = BASE + timedelta(hours=41)
    events += [{"event_id": f"00000000-0000-4000-8000-00000000000{i}", "job_id": "other-team",
                "model": name, "attempt": 0, "team": "elsewhere", **e} for i, e in enumerate([
                    {"type": "allocated", "ts": late.isoformat(), "gpus": 4},
                    {"type": "released", "ts": (late + timedelta(hours=1)).isoformat(),
                     "attrs": {"reason": "completed"}}])]
    for i in range(0, len(events), 5000):
        assert api.post("/v1/events", json={"events": events[i:i + 5000]}).status_code == 202
    api.post("/v1/aggregate")
    windows = [(BASE - timedelta(days=1), BASE + timedelta(days=3)),
               (BASE + timedelta(hours=5), BASE + timedelta(hours=20)),
               (BASE + timedelta(hours=39), BASE + timedelta(hours=45))]
    with db_engine.connect() as conn:
        for start, end in windows:
            for model in (None, name):
                f = "" if model is None else "AND model = :model"
                params = {"start": start, "end": end, **({} if model is None else {"model": model})}
                before = [tuple(r) for r in conn.execute(text(_BEFORE.format(f=f)), params)]
                assert [tuple(r) for r in checkpoint_sums(conn, start, end, model)] == before
        teams = {r.model: r.team for r in checkpoint_sums(conn, *windows[0], None)}
    assert teams[name] == "elsewhere"
