"""/metrics serves what `generate_latest` would render, byte for byte, with the aggregator's
families rendered once per pass: the same text between passes, new text after each."""

from __future__ import annotations

from prometheus_client import generate_latest

from tests.factories import event, post_all, spec_example

_LIVE = ("ett_http_", "ett_event_loop_lag_seconds", "ett_ingest_store_lag_seconds")


def _without_request_metrics(text: str) -> str:
    # A scrape is itself a request: the request metrics, the event loop's lag probed
    # every 10 ms and the group commits' lag move between two renderings.
    return "".join(line for line in text.splitlines(keepends=True)
                   if not line.removeprefix("# HELP ").removeprefix("# TYPE ")
                   .startswith(_LIVE))


def test_the_exposition_is_generate_latest_and_follows_every_pass(api, exporter,
                                                                   app_context) -> None:
    registry = app_context.registry
    events = spec_example()
    checkpoint = next(e for e in events if e["type"] == "checkpoint")
    post_all(api, [e for e in events if e is not checkpoint])
    api.post("/v1/aggregate")
    first = registry.exposition()
    assert _without_request_metrics(first.decode()) == _without_request_metrics(
        generate_latest(registry).decode())
    assert "ett_settled_gpu_seconds_total{" in first.decode()
    kept = exporter.rendered()
    assert exporter.rendered() is kept  # nothing changed: not rendered again
    served = api.get("/metrics").text
    assert _without_request_metrics(served) == _without_request_metrics(first.decode())
    # A pass that revises the figures (the late checkpoint) and one that adds a job: each
    # scrape after them shows what generate_latest shows then.
    post_all(api, [checkpoint])
    api.post("/v1/aggregate")
    second = registry.exposition().decode()
    assert _without_request_metrics(second) == _without_request_metrics(
        generate_latest(registry).decode())
    assert _without_request_metrics(second) != _without_request_metrics(first.decode())
    assert "ett_settled_revisions_gpu_seconds_total{model=\"model-a\"} 14400.0" in second
    post_all(api, [event("allocated", 0, job_id="job-2", model="model-b", gpus=4,
                         team="ads"),
                   event("released", 30, job_id="job-2", model="model-b",
                         attrs={"reason": "completed"})])
    api.post("/v1/aggregate")
    third = api.get("/metrics").text
    assert 'model="model-b"' in third and 'model="model-b"' not in second
    # An exporter that gives up leadership says so at the next scrape.
    exporter.close()
    assert "ett_metrics_leader 0.0" in registry.exposition().decode()
