"""A per-team bound on exported model series: a writer inventing
model names cannot grow /metrics without bound."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from prometheus_client.parser import text_string_to_metric_families

from service.metrics.collector import register_aggregator_metrics
from service.metrics.folding import kept_models
from tests.factories import event

NOW = datetime(2026, 11, 20, tzinfo=UTC)


@pytest.fixture
def bounded(app_context, db_engine):
    app_context.aggregator.clock = lambda: NOW
    collector = register_aggregator_metrics(app_context.registry, app_context.aggregator,
                                            db_engine, max_models_per_team=3)
    yield collector
    collector.close()


def test_models_beyond_the_bound_are_summed_as_other_and_counted(api, bounded) -> None:
    # Team ads: 8 models, 1 GPU for 60 minutes each, model i starting i hours in: the three
    # first seen (m0, m1, m2) keep their series; m3..m7 sum to 5 x 3600 = 18000 GPU-s held.
    events = []
    for i in range(8):
        job = f"job-{i}"
        events += [event("allocated", 60 * i, job_id=job, model=f"m{i}", gpus=1, team="ads"),
                   event("phase_start", 60 * i, job_id=job, model=f"m{i}", phase="training"),
                   event("released", 60 * i + 60, job_id=job, model=f"m{i}",
                         attrs={"reason": "completed"})]
    events += [event("allocated", 0, job_id="s", model="solo", gpus=2, team="search"),
               event("released", 30, job_id="s", model="solo")]
    assert api.post("/v1/events", json={"events": events}).json()["accepted"] == len(events)
    api.post("/v1/aggregate")
    text = api.get("/metrics").text
    held = {}
    folded = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "ett_held_gpu_seconds_total":
                held[(s.labels["model"], s.labels["team"])] = s.value
            if s.name == "ett_metrics_folded_models":
                folded[s.labels["team"]] = s.value
    assert held == {("m0", "ads"): 3600.0, ("m1", "ads"): 3600.0, ("m2", "ads"): 3600.0,
                    ("other", "ads"): 18000.0, ("solo", "search"): 3600.0}
    assert folded == {"ads": 5.0}
    assert 'model="m7"' not in text


def test_a_new_model_never_displaces_one_already_kept() -> None:
    early = datetime(2026, 1, 1)
    late = datetime(2026, 6, 1)
    first = [("b", "t", early), ("a", "t", late), ("c", "t", late)]
    assert kept_models(first, [], 2) == {("b", "t"), ("a", "t")}
    # "0new" sorts first by name but was seen last: it is the one folded.
    assert kept_models([*first, ("0new", "t", datetime(2027, 1, 1))], [], 3) == {
        ("b", "t"), ("a", "t"), ("c", "t")}
    # A pair with no first-seen time (its jobs pruned) sorts last.
    assert kept_models(first, [("zz", "t")], 3) == {("b", "t"), ("a", "t"), ("c", "t")}


@pytest.fixture
def few_teams(app_context, db_engine):
    app_context.aggregator.clock = lambda: NOW
    collector = register_aggregator_metrics(app_context.registry, app_context.aggregator,
                                            db_engine, max_models_per_team=3, max_teams=2)
    yield collector
    collector.close()


def test_teams_beyond_the_bound_are_summed_as_team_other_and_counted(api, few_teams) -> None:
    """Teams are folded as models per team are (unfolded, 1,500 invented teams take
    /metrics from 1,914 to 109,758 lines). Five teams, one model each, 1 GPU for
    an hour, team i starting i hours in: t0 and t1 (first seen) keep their series; t2..t4
    sum to 3 x 3600 GPU-s under team="other", model="other"."""
    events = []
    for i in range(5):
        job, model = f"job-{i}", f"model-{i}"
        events += [event("allocated", 60 * i, job_id=job, model=model, gpus=1, team=f"t{i}"),
                   event("released", 60 * i + 60, job_id=job, model=model)]
    assert api.post("/v1/events", json={"events": events}).json()["accepted"] == len(events)
    api.post("/v1/aggregate")
    text = api.get("/metrics").text
    held, folded_teams, teams = {}, None, set()
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if "team" in s.labels:
                teams.add(s.labels["team"])
            if s.name == "ett_held_gpu_seconds_total":
                held[(s.labels["model"], s.labels["team"])] = s.value
            if s.name == "ett_metrics_folded_teams":
                folded_teams = s.value
    assert held == {("model-0", "t0"): 3600.0, ("model-1", "t1"): 3600.0,
                    ("other", "other"): 10800.0}
    assert folded_teams == 3.0
    assert teams <= {"t0", "t1", "other"}
    assert "model-4" not in text


def test_other_is_reserved_as_a_model_and_a_team_at_ingest(api) -> None:
    """So a real model named `other` is never merged into the folded series."""
    padding = [event("heartbeat", i, job_id="pad", model="pad") for i in range(20)]
    for events in ([event("heartbeat", 0, model="other")],  # the per-event path
                   [*padding, event("heartbeat", 30, model="m", team="other")]):  # whole batch
        body = api.post("/v1/events", json={"events": events}).json()
        assert [r["index"] for r in body["rejected"]] == [len(events) - 1]
        assert "'other' is reserved" in body["rejected"][0]["error"]
