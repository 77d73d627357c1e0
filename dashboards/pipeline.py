"""Pipeline dashboard: is the telemetry itself healthy? Ingest, aggregation, API latency."""

from __future__ import annotations

from grafana_foundation_sdk.builders import prometheus as prom_b
from grafana_foundation_sdk.models import dashboard as dash_m

from .common import (
    RATIO,
    SECONDS,
    SQL,
    PanelBuilder,
    assign_panel_ids,
    datasource_variables,
    new_dashboard,
    promql,
    row,
    sql,
    stat_panel,
    timeseries_panel,
)

UID = "ett-pipeline"

INGESTED = "ett_events_ingested_total"


def _quantiles(metric: str, by: str = "") -> list[prom_b.Dataquery]:
    group = f"le, {by}" if by else "le"
    suffix = f" {{{{{by}}}}}" if by else ""
    return [promql(f"histogram_quantile({q}, sum by ({group}) "
                   f"(rate({metric}_bucket[$__rate_interval])))", f"p{int(q * 100)}{suffix}",
                   ref_id=r)
            for q, r in ((0.5, "A"), (0.9, "B"), (0.99, "C"))]


def _stats() -> list[PanelBuilder]:
    return [
        stat_panel("Since last aggregation", "Seconds since an aggregation pass last succeeded.",
                   [promql("time() - max(ett_aggregation_last_success_timestamp_seconds)",
                           instant=True)], SECONDS,
                   thresholds=[(None, "green"), (120, "orange"), (300, "red")]),
        stat_panel("Aggregation lag", "Age of the oldest job waiting to be recomputed.",
                   [promql("max(ett_aggregation_lag_seconds)", instant=True)], SECONDS,
                   thresholds=[(None, "green"), (120, "orange"), (300, "red")]),
        stat_panel("Quarantined jobs", "Jobs the aggregator could not compute or store, held "
                   "out until their events change (GET /v1/admin/quarantine lists them).",
                   [promql("max(ett_aggregation_quarantined_jobs)", instant=True)], "none",
                   thresholds=[(None, "green"), (1, "red")]),
        stat_panel("Rejected events", "Share of posted events rejected over the range.",
                   [promql(f'sum(increase({INGESTED}{{outcome="rejected"}}[$__range]))\n/\n'
                           f"sum(increase({INGESTED}[$__range]))", instant=True)], RATIO,
                   thresholds=[(None, "green"), (0.01, "red")]),
        stat_panel("Scrape targets up", "ETT targets Prometheus scrapes successfully.",
                   [promql('sum(up{job=~"ett.*"})', instant=True)], "none"),
        stat_panel("Queued jobs (PostgreSQL)", "Jobs waiting for the aggregator, read from the "
                   "work queue directly (true even when the exporter is down).",
                   [sql("SELECT count(DISTINCT job_id) AS \"queued jobs\" FROM dirty_jobs")],
                   "none", ds=SQL),
        stat_panel("Oldest queued job (PostgreSQL)", "Age of the oldest work-queue row.",
                   [sql("SELECT coalesce(extract(epoch FROM now() - min(marked_at)), 0) "
                        "AS \"age\" FROM dirty_jobs")],
                   SECONDS, ds=SQL, thresholds=[(None, "green"), (300, "red")]),
    ]


def _panels() -> list[PanelBuilder]:
    return [
        timeseries_panel(
            "Ingest rate by outcome",
            "Events per second: accepted, duplicate (client retries), rejected.",
            [promql(f"sum by (outcome) (rate({INGESTED}[$__rate_interval]))", "{{outcome}}")],
            "suffix: events/s", stacked=True),
        timeseries_panel(
            "Unknown-phase events by model",
            "Events whose phase the taxonomy does not know (their time goes to unattributed).",
            [promql("sum by (model) (rate(ett_unknown_phase_events_total[$__rate_interval]))",
                    "{{model}}")], "suffix: events/s"),
        timeseries_panel(
            "Aggregation lag",
            "Age of the oldest queued job, and time since the last good pass.",
            [promql("max(ett_aggregation_lag_seconds)", "lag"),
             promql("time() - max(ett_aggregation_last_success_timestamp_seconds)",
                    "since last success", ref_id="B")], SECONDS, min_val=0),
        timeseries_panel(
            "Aggregation pass duration",
            "p50 / p90 / p99 of one aggregation pass.",
            _quantiles("ett_aggregation_duration_seconds"), SECONDS),
        timeseries_panel(
            "Jobs aggregated by outcome",
            "Jobs recomputed per second; any error is logged with the job id.",
            [promql("sum by (outcome) (rate(ett_aggregation_jobs_total[$__rate_interval]))",
                    "{{outcome}}")], "suffix: jobs/s"),
        timeseries_panel(
            "Settled revisions",
            "Settled GPU-hours per hour revised by late events after they were exported.",
            [promql("sum by (model) (rate(ett_settled_revisions_gpu_seconds_total"
                    "[$__rate_interval])) * 3600", "{{model}}")], "suffix: GPU-h/h"),
        timeseries_panel(
            "Request latency p99 by route",
            "p99 of HTTP request duration per route template.",
            [promql("histogram_quantile(0.99, sum by (le, route) "
                    "(rate(ett_http_request_duration_seconds_bucket[$__rate_interval])))",
                    "{{route}}")], SECONDS),
        timeseries_panel(
            "Request latency, all routes",
            "p50 / p90 / p99 of HTTP request duration over every route.",
            _quantiles("ett_http_request_duration_seconds"), SECONDS),
        timeseries_panel(
            "Requests by status",
            "Requests per second by HTTP status (429/503 mean back-pressure).",
            [promql("sum by (status) (rate(ett_http_request_duration_seconds_count"
                    "[$__rate_interval]))", "{{status}}")], "reqps", w=24, stacked=True),
    ]


def build() -> dash_m.Dashboard:
    d = new_dashboard(UID, "ETT / Pipeline",
                      "Health of the telemetry pipeline: ingest, aggregation, API latency. "
                      "See docs/dashboards.md.", ["pipeline"], "now-6h")
    for v in datasource_variables():
        d = d.with_variable(v)
    d = d.with_row(row("Status"))
    for p in _stats():
        d = d.with_panel(p)
    d = d.with_row(row("Ingest and aggregation"))
    for p in _panels():
        d = d.with_panel(p)
    return assign_panel_ids(d.build())
