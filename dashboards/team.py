"""Team dashboard (`$team`): the team's bill (GPU time its phases cost, by phase and by
model), its SLOs and burn rates, and the models that cost it most."""

from __future__ import annotations

from grafana_foundation_sdk.models import dashboard as dash_m

from . import impact_panels, slo_panels
from .common import (
    GPU_HOURS,
    PROM,
    RATIO,
    SQL,
    US_PER_HOUR,
    PanelBuilder,
    assign_panel_ids,
    bargauge_panel,
    changes_annotation,
    datasource_variables,
    new_dashboard,
    promql,
    row,
    sql,
    stat_panel,
    table_panel,
    team_variable,
    timeseries_panel,
)
from .fleet import ETT_THRESHOLDS, TOTAL_US, gpu_hours_per_interval

UID = "ett-team"

BILL = 'ett_settled_gpu_seconds_total{owner="$team", component!="effective_training"}'
# `$team` is single-valued here: Grafana substitutes it unquoted, so SQL quotes it.
BILL_SQL = "$__timeFilter(hour) AND owner = '$team' AND component <> 'effective_training'"


def _stats() -> list[PanelBuilder]:
    return [
        stat_panel(f"Team models' ETT, {w}", f"ETT of the models whose team is $team, last {w}.",
                   [promql(f'ett_team_ett_ratio_{w}{{team="$team"}}', instant=True)], RATIO,
                   thresholds=ETT_THRESHOLDS)
        for w in ("1h", "1d", "7d")
    ] + [
        stat_panel("Bill over the range", "Settled non-effective GPU-hours owned by $team.",
                   [promql(f"sum(increase({BILL}[$__range])) / 3600", instant=True)], GPU_HOURS),
        stat_panel("At-risk GPU-hours (team models)", "Uncheckpointed training of $team's models.",
                   [promql('sum(ett_at_risk_gpu_seconds{team="$team"}) / 3600', instant=True)],
                   GPU_HOURS),
        stat_panel("Firing ETT alerts", "Alerts routed to $team that are firing now.",
                   [promql('count(ALERTS{alertstate="firing", team="$team"}) or vector(0)',
                           instant=True)], "none",
                   thresholds=[(None, "green"), (1, "red")]),
    ]


def _bill() -> list[PanelBuilder]:
    return [
        timeseries_panel(
            "Bill by model",
            "GPU-hours per hour that $team's phases cost, split by the model that paid them.",
            [promql(f"sum by (model) (rate({BILL}[$__rate_interval])) * 3600", "{{model}}")],
            "suffix: GPU-h/h", stacked=True),
        bargauge_panel(
            "Bill by phase (PostgreSQL)",
            "GPU-hours of each phase owned by $team over the range (phases are not a "
            "Prometheus label; the rollups keep them).",
            [sql(f"""
                SELECT phase, sum({TOTAL_US})::float8 / {US_PER_HOUR} AS "GPU-h"
                FROM fleet_hourly
                WHERE {BILL_SQL}
                GROUP BY phase
                ORDER BY 2 DESC""")],
            GPU_HOURS, ds=SQL),
        timeseries_panel(
            "Bill by phase over time (PostgreSQL)",
            "GPU-hours per interval of each phase owned by $team.",
            [sql(gpu_hours_per_interval("phase", BILL_SQL), fmt="time_series")],
            GPU_HOURS, ds=SQL, stacked=True, bars=True, min_interval="1h"),
        table_panel(
            "Models that cost $team most (PostgreSQL)",
            "Models ranked by the GPU-hours they spent in phases $team owns, with each "
            "model's own team and its share of the bill.",
            [sql(f"""
                SELECT model, team AS "model team",
                       sum({TOTAL_US})::float8 / {US_PER_HOUR} AS "billed GPU-h",
                       sum({TOTAL_US})::float8 / NULLIF(sum(sum({TOTAL_US})) OVER (), 0)
                         AS "share of bill"
                FROM fleet_hourly
                WHERE {BILL_SQL}
                GROUP BY model, team
                ORDER BY 3 DESC
                LIMIT 20""")],
            w=12, h=8),
    ]


def _slos() -> list[PanelBuilder]:
    spec = slo_panels.load_spec()
    windows = slo_panels.burn_windows(spec)
    refs = "ABCDEFGH"
    return [
        bargauge_panel(
            "SLO error budget spent (period)",
            "Share of each $team SLO's error budget spent over its period (1 = all of it), "
            "from the raw counters. deploy/slo.yaml defines the SLOs.",
            [promql(slo_panels.budget_consumed_expr(spec), "{{slo}}", instant=True)], RATIO),
        timeseries_panel(
            "SLO burn rates",
            "Error rate over each alerting window divided by the budget: 1 spends the budget "
            "exactly over the period; the page thresholds are in docs/alerts.md.",
            [promql(slo_panels.burn_rate_expr(spec, w), f"{{{{slo}}}} {w}", ref_id=refs[i])
             for i, w in enumerate(windows)], "none", min_val=0),
        timeseries_panel(
            "Quantile SLOs: value / threshold",
            "Recorded time-to-start / time-to-recover quantile over its SLO threshold "
            "(above 1: the SLO is violated).",
            [promql(slo_panels.quantile_ratio_expr(spec), "{{slo}}")], "none", min_val=0),
        table_panel(
            "Firing alerts for $team",
            "Prometheus' ALERTS series for alerts routed to $team.",
            [promql('ALERTS{alertstate="firing", team="$team"}', instant=True,
                    table_format=True)],
            ds=PROM, w=12, h=8),
    ]


def build() -> dash_m.Dashboard:
    d = new_dashboard(UID, "ETT / Team",
                      "One team's bill: the GPU time its phases cost, by phase and by model, "
                      "and its SLOs. See docs/dashboards.md.", ["team"], "now-7d")
    for v in [*datasource_variables(), team_variable(multi=False, include_owners=True),
              *impact_panels.label_variables()]:
        d = d.with_variable(v)
    d = d.with_row(row("Now (Prometheus)"))
    for p in _stats():
        d = d.with_panel(p)
    d = d.with_row(row("Bill"))
    for p in _bill():
        d = d.with_panel(p)
    d = d.with_row(row("Impact (two labelled cohorts over the range)"))
    for p in impact_panels.panels():
        d = d.with_panel(p)
    d = d.with_row(row("SLOs"))
    for p in _slos():
        d = d.with_panel(p)
    d = d.annotation(changes_annotation("'$team'", None))
    return assign_panel_ids(d.build())
