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
