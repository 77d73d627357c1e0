"""/metrics: the aggregator's collector, counters that never go backwards, cardinality."""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from service.metrics.collector import register_aggregator_metrics
from tests.factories import demo_events, post_all, spec_example


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_a_pass_exports_the_catalog_figures(api, exporter) -> None:
    post_all(api, spec_example())
    api.post("/v1/aggregate")
    m = samples(api.get("/metrics").text)
    key = (("component", "compilation"), ("model", "model-a"), ("owner", "compiler"),
           ("team", "ads"))
    assert m[("ett_settled_gpu_seconds_total", key)] == 15 * 60 * 8
    assert m[("ett_held_gpu_seconds_total", (("model", "model-a"), ("team", "ads")))] == (
        160 * 60 * 8)
    assert m[("ett_failures_total", (("cause", "infra"), ("model", "model-a"),
                                     ("team", "ads")))] == 1
    assert m[("ett_time_to_recover_seconds_sum", (("cause", "infra"), ("team", "ads")))] == 2640
    assert m[("ett_time_to_start_seconds_count", (("team", "ads"),))] == 1
    assert m[("ett_metrics_leader", ())] == 1
    # Present at 0 before any revision, so rate() over it has data from the start.
    assert m[("ett_settled_revisions_gpu_seconds_total", (("model", "model-a"),))] == 0
    assert ("ett_aggregation_last_success_timestamp_seconds", ()) in m
    documented = Path("docs/metrics.md").read_text()
    for name in {n for n, _ in m}:
        base = name.removesuffix("_bucket").removesuffix("_count").removesuffix("_sum")
        if not base.endswith("_total") and base + "_total" in documented:
            base += "_total"
        assert f"`{base}`" in documented or base.rsplit("_", 1)[0] in documented, base


def test_a_late_revision_never_lowers_an_exported_counter(api, exporter) -> None:
    events = spec_example()
    checkpoint = next(e for e in events if e["type"] == "checkpoint")
    post_all(api, [e for e in events if e is not checkpoint])
    api.post("/v1/aggregate")
    before = samples(api.get("/metrics").text)
    post_all(api, [checkpoint])  # lost progress shrinks from 59 to 29 minutes
    api.post("/v1/aggregate")
    after = samples(api.get("/metrics").text)
    lost = ("ett_settled_gpu_seconds_total", (("component", "wasted_training"),
            ("model", "model-a"), ("owner", "reliability"), ("team", "ads")))
    assert before[lost] == 59 * 60 * 8
    assert after[lost] == before[lost]  # kept: counters never go backwards
    revisions = after[("ett_settled_revisions_gpu_seconds_total", (("model", "model-a"),))]
    assert revisions == 30 * 60 * 8
    for key, value in before.items():
        if key[0].endswith("_total"):
            assert after.get(key, value) >= value, key


def test_a_restarted_exporter_continues_its_counters(api, exporter, app_context,
                                                     db_engine) -> None:
    events = spec_example()
    checkpoint = next(e for e in events if e["type"] == "checkpoint")
    post_all(api, [e for e in events if e is not checkpoint])
    api.post("/v1/aggregate")
    post_all(api, [checkpoint])
    api.post("/v1/aggregate")
    first = samples(generate_latest(app_context.registry).decode())
    exporter.close()  # the process goes away; a new one takes over
    registry = CollectorRegistry()
    fresh = register_aggregator_metrics(registry, app_context.aggregator, db_engine)
    fresh.refresh()
    second = samples(generate_latest(registry).decode())
    fresh.close()
    revised = ("ett_settled_revisions_gpu_seconds_total", (("model", "model-a"),))
    assert first[revised] == 30 * 60 * 8
    for key, value in first.items():
        if key[0] in ("ett_settled_gpu_seconds_total", revised[0]):
            assert second[key] == value, key


def test_only_one_process_exports_the_database_figures(api, exporter, app_context,
                                                       db_engine) -> None:
    post_all(api, spec_example())
    api.post("/v1/aggregate")
    other = CollectorRegistry()
    follower = register_aggregator_metrics(other, app_context.aggregator, db_engine)
    follower.refresh()
    text = generate_latest(other).decode()
    follower.close()
    assert "ett_metrics_leader 0.0" in text
    assert "ett_settled_gpu_seconds_total{" not in text


def test_an_api_only_app_exposes_only_request_metrics(api) -> None:
    text = api.get("/metrics").text
    assert "ett_http_request_duration_seconds" in text
    assert "ett_settled_gpu_seconds_total" not in text


def test_a_demo_fleet_stays_under_40_series_per_model(api, exporter) -> None:
    post_all(api, demo_events(models=12, hours=48))
    api.post("/v1/aggregate")
    per_model: Counter[str] = Counter()
    for (_name, labels), _ in samples(api.get("/metrics").text).items():
        model = dict(labels).get("model")
        if model:
            per_model[model] += 1
    assert per_model and max(per_model.values()) <= 40, per_model.most_common(3)


@pytest.mark.skipif(not shutil.which("promtool"), reason="needs Debian's prometheus (promtool)")
def test_the_exposition_passes_promtool_check_metrics(api, exporter) -> None:
    post_all(api, demo_events(models=6, hours=24))
    api.post("/v1/aggregate")
    text = api.get("/metrics").text
    result = subprocess.run(["promtool", "check", "metrics"], input=text, text=True,
                            capture_output=True)
    assert result.returncode == 0, result.stdout + result.stderr
