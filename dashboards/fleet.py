"""Fleet dashboard: where the fleet's GPU time goes, who owns the loss, how fast jobs
start and recover. `$team` / `$model` narrow to the models' own teams and models."""

from __future__ import annotations

from grafana_foundation_sdk.models import dashboard as dash_m

from .checkpoint_advice_panels import fleet_panel as checkpoint_advice_panel
from .common import (
    GPU_HOURS,
    RATIO,
    SECONDS,
    SQL,
    US_PER_HOUR,
    PanelBuilder,
    assign_panel_ids,
    bargauge_panel,
    changes_annotation,
    datasource_variables,
    model_variable,
    new_dashboard,
    promql,
    row,
    sql,
    stat_panel,
    table_panel,
    team_variable,
    timeseries_panel,
)

UID = "ett-fleet"

SEL = 'team=~"$team", model=~"$model"'
EFFECTIVE = f'ett_settled_gpu_seconds_total{{component="effective_training", {SEL}}}'
LOST = f'ett_settled_gpu_seconds_total{{component!="effective_training", {SEL}}}'
HELD = f"ett_held_gpu_seconds_total{{{SEL}}}"
ETT_THRESHOLDS: list[tuple[float | None, str]] = [(None, "red"), (0.8, "orange"), (0.9, "green")]

# SQL filters shared by the history panels (multi-value variables: quoted lists).
SQL_SEL = "$__timeFilter(hour) AND team IN ($team) AND model IN ($model)"
TOTAL_US = "(settled_gpu_us + unsettled_gpu_us)"


def ett_per_interval(where: str) -> str:
    """ETT per interval of the hourly rollup rows that match `where` (a time series)."""
    return f"""
                SELECT $__timeGroupAlias(hour, $__interval),
                       sum({TOTAL_US}) FILTER (WHERE component = 'effective_training')::float8
                         / NULLIF(sum({TOTAL_US}), 0) AS "ETT"
                FROM fleet_hourly
                WHERE {where}
                GROUP BY 1
                ORDER BY 1"""


def gpu_hours_per_interval(label: str, where: str) -> str:
    """GPU-hours per interval and value of the `label` column, over the hourly rollup rows
    that match `where` (a time series)."""
    return f"""
                SELECT $__timeGroupAlias(hour, $__interval), {label} AS metric,
                       sum({TOTAL_US})::float8 / {US_PER_HOUR} AS value
                FROM fleet_hourly
                WHERE {where}
                GROUP BY 1, 2
                ORDER BY 1"""


def _stats() -> list[PanelBuilder]:
    return [
        stat_panel(f"Fleet ETT, {w}", f"Exported fleet ETT ratio over the last {w} (whole fleet, "
                   "ignores the team/model filters).",
                   [promql(f"ett_fleet_ett_ratio_{w}", instant=True)], RATIO,
                   thresholds=ETT_THRESHOLDS)
        for w in ("1h", "1d", "7d")
    ] + [
        stat_panel("Selection ETT over the range", "Settled effective / settled held GPU-seconds "
                   "of the selected teams and models over the dashboard range.",
                   [promql(f"sum(increase({EFFECTIVE}[$__range]))\n/\n"
                           f"sum(increase({HELD}[$__range]))", instant=True)], RATIO,
                   thresholds=ETT_THRESHOLDS),
        stat_panel("At-risk GPU-hours now", "Training after the latest durable checkpoint: "
                   "effective only if the next checkpoint lands.",
                   [promql(f"sum(ett_at_risk_gpu_seconds{{{SEL}}}) / 3600", instant=True)],
                   GPU_HOURS),
        stat_panel("Jobs running", "Jobs whose last attempt is running.",
                   [promql(f"sum(ett_jobs_running{{{SEL}}})", instant=True)], "none"),
    ]


def _live() -> list[PanelBuilder]:
    return [
        timeseries_panel(
            "Fleet ETT% over time",
            "Selection: settled effective / settled held GPU-seconds over a sliding hour. "
            "Fleet 1 d: the exported whole-fleet gauge.",
            [promql(f"sum(rate({EFFECTIVE}[1h]))\n/\nsum(rate({HELD}[1h]))",
                    "selection (1 h window)"),
             promql("ett_fleet_ett_ratio_1d", "fleet (1 d)", ref_id="B")],
            RATIO, min_val=0, max_val=1),
        timeseries_panel(
            "GPU-hours by component",
            "Settled GPU-hours per hour in each Level-2 component (the stack is held time).",
            [promql(f"sum by (component) (rate(ett_settled_gpu_seconds_total{{{SEL}}}"
                    "[$__rate_interval])) * 3600", "{{component}}")],
            "suffix: GPU-h/h", stacked=True),
        bargauge_panel(
            "Lost GPU-hours by owning team",
            "Settled non-effective GPU-hours over the range, by the team that owns each phase "
            "(the bill each team owns).",
            [promql(f"sort_desc(sum by (owner) (increase({LOST}[$__range]))) / 3600",
                    "{{owner}}", instant=True)], GPU_HOURS),
        bargauge_panel(
            "Top models by lost GPU-hours",
            "The ten models with the most settled non-effective GPU-hours over the range.",
            [promql(f"topk(10, sum by (model) (increase({LOST}[$__range]))) / 3600",
                    "{{model}}", instant=True)], GPU_HOURS),
        timeseries_panel(
            "Time to start, p50 / p90",
            "From allocation of attempt 0 to its first training instant, over a sliding hour "
            "(starts are sparse, so the window is not shorter).",
            [promql(f'histogram_quantile({q}, sum by (le) (rate(ett_time_to_start_seconds_bucket'
                    f'{{team=~"$team"}}[1h])))', f"p{int(q * 100)}", ref_id=r)
             for q, r in ((0.5, "A"), (0.9, "B"))], SECONDS, w=8),
        timeseries_panel(
            "Time to recover, p50 / p90",
            "From an interruption to training again (lost progress + teardown + next startup).",
            [promql(f'histogram_quantile({q}, sum by (le) (rate(ett_time_to_recover_seconds_bucket'
                    f'{{team=~"$team"}}[1h])))', f"p{int(q * 100)}", ref_id=r)
             for q, r in ((0.5, "A"), (0.9, "B"))], SECONDS, w=8),
        timeseries_panel(
            "Failures by cause",
            "Interrupted attempts per hour: infra, user, preemption, lost.",
            [promql(f"sum by (cause) (rate(ett_failures_total{{{SEL}}}[$__rate_interval])) * 3600",
                    "{{cause}}")], "suffix: /h", w=8, stacked=True, bars=True),
        timeseries_panel(
            "At-risk GPU-hours by team",
            "Training not yet covered by a durable checkpoint, per model team.",
            [promql(f"sum by (team) (ett_at_risk_gpu_seconds{{{SEL}}}) / 3600", "{{team}}")],
            GPU_HOURS, w=12, stacked=True),
        # A newcomer's first jobs usually land here: the fix is the taxonomy's `models:` or
        # the recorder's `team=`, and nobody is billed until it is made.
        timeseries_panel(
            "Unassigned GPU-hours by model (a thing to fix)",
            "Held GPU-hours per hour of jobs whose model has no team: posted without `team`, "
            "and not named in the taxonomy's `models:`. Give the model a team there (or "
            "`Recorder(team=...)` / ETT_TEAM) so its time is billed to someone.",
            # `or vector(0)`: a fleet with nothing unassigned draws a flat zero, the good
            # news, rather than "no data", which reads like a broken panel.
            [promql('(sum by (model) (rate(ett_held_gpu_seconds_total{team="unassigned", '
                    'model=~"$model"}[$__rate_interval])) * 3600) or on() vector(0)',
                    "{{model}}")],
            "suffix: GPU-h/h", w=12, stacked=True),
        # Stalls (docs/model.md section 24): held GPUs whose steps did not advance.
        timeseries_panel(
            "Stalled GPU-hours by model",
            "GPU-hours per hour held while a job's optimizer step did not advance for longer "
            "than its stall threshold (hung collectives, dead data loaders): wasted training "
            "owned by reliability. EttJobStalled pages while one is going on.",
            [promql(f"(sum by (model) (rate(ett_stalled_gpu_seconds_total{{{SEL}}}"
                    "[$__rate_interval])) * 3600) or on() vector(0)", "{{model}}")],
            "suffix: GPU-h/h", w=12, stacked=True),
        timeseries_panel(
            "Jobs stalled now, by team",
            "Running jobs whose steps stopped advancing for longer than their threshold, per "
            "model team.",
            [promql(f"sum by (team) (ett_stalled_jobs{{{SEL}}})", "{{team}}")],
            "none", w=12, stacked=True),
        # The scheduler's word (docs/model.md section 25): what no trainer reported.
        bargauge_panel(
            "Uninstrumented GPU-hours by team",
            "Held GPU-hours over the range of attempts the scheduler (ett slurm) reported and "
            "no trainer did: jobs without the SDK. Instrument them (or accept them as "
            "unreported) to know where that time goes.",
            [promql("sort_desc(sum by (team) (increase(ett_uninstrumented_gpu_seconds_total"
                    f"{{{SEL}}}[$__range]))) / 3600", "{{team}}", instant=True)], GPU_HOURS),
        timeseries_panel(
            "Queue hours by team (beside ETT, not in it)",
            "Hours attempts waited from submission (or eligibility) to allocation per hour, as "
            "the scheduler reported them. Queue time holds no GPU and is never in ETT%.",
            [promql(f"sum by (team) (rate(ett_queue_seconds_total{{{SEL}}}[$__rate_interval]))",
                    "{{team}}")], "suffix: h/h", w=12, stacked=True),
    ]


def _history() -> list[PanelBuilder]:
    return [
        timeseries_panel(
            "Fleet ETT% (PostgreSQL, any range)",
            "From the hourly rollups: works for ranges longer than Prometheus keeps. Includes "
            "time that is not settled yet, so the last hours can still move.",
            [sql(ett_per_interval(SQL_SEL), fmt="time_series")],
            RATIO, ds=SQL, min_val=0, max_val=1, min_interval="1h"),
        timeseries_panel(
            "GPU-hours by component (PostgreSQL)",
            "Held GPU-hours per interval in each component, from the hourly rollups.",
            [sql(gpu_hours_per_interval("component", SQL_SEL), fmt="time_series")],
            GPU_HOURS, ds=SQL, stacked=True, bars=True, min_interval="1h"),
        bargauge_panel(
            "Lost GPU-hours by owning team (PostgreSQL)",
            "Non-effective GPU-hours over the range by owning team, from the hourly rollups.",
            [sql(f"""
                SELECT owner, sum({TOTAL_US})::float8 / {US_PER_HOUR} AS "lost GPU-h"
                FROM fleet_hourly
                WHERE {SQL_SEL} AND component <> 'effective_training'
                GROUP BY owner
                ORDER BY 2 DESC""")],
            GPU_HOURS, ds=SQL),
        table_panel(
            "Top models by lost GPU-hours (PostgreSQL)",
            "Models ranked by non-effective GPU-hours over the range, with held time and ETT.",
            [sql(f"""
                SELECT model, team,
                       sum({TOTAL_US})::float8 / {US_PER_HOUR} AS "held GPU-h",
                       sum({TOTAL_US}) FILTER (WHERE component <> 'effective_training')::float8
                         / {US_PER_HOUR} AS "lost GPU-h",
                       sum({TOTAL_US}) FILTER (WHERE component = 'effective_training')::float8
                         / NULLIF(sum({TOTAL_US}), 0) AS "ETT"
                FROM fleet_hourly
                WHERE {SQL_SEL}
                GROUP BY model, team
                ORDER BY 4 DESC NULLS LAST
                LIMIT 20""")],
            w=12, h=8),
        checkpoint_advice_panel(),
    ]


def build() -> dash_m.Dashboard:
    d = new_dashboard(UID, "ETT / Fleet",
                      "Effective Training Time of the whole fleet: where held GPU time goes "
                      "and which team owns every lost hour. See docs/dashboards.md.",
                      ["fleet"], "now-7d")
    for v in [*datasource_variables(), team_variable(multi=True), model_variable(multi=True)]:
        d = d.with_variable(v)
    d = d.with_row(row("Now (Prometheus)"))
    for p in _stats():
        d = d.with_panel(p)
    for p in _live():
        d = d.with_panel(p)
    d = d.with_row(row("History (PostgreSQL rollups)"))
    for p in _history():
        d = d.with_panel(p)
    d = d.annotation(changes_annotation('$team', '$model'))
    return assign_panel_ids(d.build())
