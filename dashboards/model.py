"""Model dashboard (`$model`): ETT over time, the component breakdown, the Level-1 terms
(TTS, TTR, NoF, in-loop overhead, final shutdown) and the recent jobs with their attempts."""

from __future__ import annotations

from grafana_foundation_sdk.models import dashboard as dash_m

from .checkpoint_advice_panels import model_panel as checkpoint_advice_panel
from .common import (
    GPU_HOURS,
    RATIO,
    SQL,
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
from .fleet import ETT_THRESHOLDS, TOTAL_US, ett_per_interval

UID = "ett-model"

M = 'model="$model"'
# Jobs that held GPUs at some point of the dashboard range ($model is single-valued).
JOBS_IN_RANGE = "model = '$model' AND first_at < $__timeTo() AND last_at >= $__timeFrom()"

# Level-1 terms are per job in plain seconds (docs/model.md section 7); weighting each by the job's
# average GPU count (held GPU-seconds / held seconds) makes them add up like GPU-hours.
LEVEL1_SQL = f"""
    WITH j AS (
      SELECT result -> 'level1' AS l1, effective_gpu_seconds,
             held_gpu_seconds / NULLIF((result ->> 'held_seconds')::float8, 0) AS gpus
      FROM jobs
      WHERE {JOBS_IN_RANGE}
    )
    SELECT term, value FROM (
      SELECT 1 AS ord, 'effective training' AS term,
             sum(effective_gpu_seconds) / 3600 AS value FROM j
      UNION ALL
      SELECT 2, 'time to start (TTS)', sum((l1 ->> 'tts_seconds')::float8 * gpus) / 3600 FROM j
      UNION ALL
      SELECT 3, 'time to recover (sum of TTR)',
             sum((SELECT coalesce(sum(x::float8), 0)
                  FROM jsonb_array_elements_text(l1 -> 'ttr_seconds') AS x) * gpus) / 3600 FROM j
      UNION ALL
      SELECT 4, 'in-loop overhead',
             sum((l1 ->> 'in_loop_overhead_seconds')::float8 * gpus) / 3600 FROM j
      UNION ALL
      SELECT 5, 'final shutdown',
             sum((l1 ->> 'final_shutdown_seconds')::float8 * gpus) / 3600 FROM j
    ) AS terms
    ORDER BY ord"""

NOF_SQL = f"""
    SELECT c.key AS cause, sum(c.value::int) AS failures,
           sum(c.value::int)::float8 / NULLIF(count(DISTINCT jobs.job_id), 0) AS "per job"
    FROM jobs, jsonb_each_text(result -> 'level1' -> 'nof_by_cause') AS c
    WHERE {JOBS_IN_RANGE}
    GROUP BY c.key
    ORDER BY 2 DESC"""

RECENT_JOBS_SQL = f"""
    SELECT j.job_id AS job, j.state, j.team,
           j.first_at AS "first event", j.last_at AS "last event",
           count(a.attempt) AS attempts, max(a.gpus) AS gpus,
           string_agg(a.attempt || ': ' || a.end_cause, ', ' ORDER BY a.attempt) AS "end causes",
           j.held_gpu_seconds / 3600 AS "held GPU-h",
           j.effective_gpu_seconds / NULLIF(j.held_gpu_seconds, 0) AS "ETT",
           j.nof AS failures,
           (j.result -> 'level1' ->> 'tts_seconds')::float8 AS "TTS s",
           (j.result -> 'level1' ->> 'mean_ttr_seconds')::float8 AS "mean TTR s"
    FROM jobs AS j
    LEFT JOIN attempts AS a ON a.job_id = j.job_id
    WHERE j.{JOBS_IN_RANGE.replace(" AND ", " AND j.")}
    GROUP BY j.job_id
    ORDER BY j.last_at DESC
    LIMIT 50"""


def _stats() -> list[PanelBuilder]:
    return [
        stat_panel(f"ETT, {w}", f"Exported ETT ratio of $model over the last {w}.",
                   [promql(f"ett_model_ett_ratio_{w}{{{M}}}", instant=True)], RATIO,
                   thresholds=ETT_THRESHOLDS)
        for w in ("1h", "1d", "7d")
    ] + [
        stat_panel("At-risk GPU-hours", "Training of $model after its latest durable checkpoint.",
                   [promql(f"sum(ett_at_risk_gpu_seconds{{{M}}}) / 3600", instant=True)],
                   GPU_HOURS),
        stat_panel("Jobs running", "Jobs of $model whose last attempt is running.",
                   [promql(f"sum(ett_jobs_running{{{M}}})", instant=True)], "none"),
        stat_panel("Failures over the range", "Interrupted attempts of $model, all causes.",
                   [promql(f"sum(increase(ett_failures_total{{{M}}}[$__range]))", instant=True)],
                   "none"),
    ]


def _live() -> list[PanelBuilder]:
    return [
        timeseries_panel(
            "ETT% over time",
            "Exported ETT ratio of $model over sliding 1 h, 1 d and 7 d windows.",
            [promql(f"ett_model_ett_ratio_{w}{{{M}}}", w, ref_id=r)
             for w, r in (("1h", "A"), ("1d", "B"), ("7d", "C"))],
            RATIO, min_val=0, max_val=1),
        timeseries_panel(
            "Component breakdown",
            "Settled GPU-hours per hour of $model in each Level-2 component.",
            [promql(f"sum by (component) (rate(ett_settled_gpu_seconds_total{{{M}}}"
                    "[$__rate_interval])) * 3600", "{{component}}")],
            "suffix: GPU-h/h", stacked=True),
        bargauge_panel(
            "Lost GPU-hours by owner",
            "Settled non-effective GPU-hours of $model over the range, by owning team.",
            [promql(f'sort_desc(sum by (owner) (increase(ett_settled_gpu_seconds_total'
                    f'{{{M}, component!="effective_training"}}[$__range]))) / 3600',
                    "{{owner}}", instant=True)], GPU_HOURS, w=8),
        bargauge_panel(
            "Failures by cause",
            "Interrupted attempts of $model over the range, by cause.",
            [promql(f"sort_desc(sum by (cause) (increase(ett_failures_total{{{M}}}[$__range])))",
                    "{{cause}}", instant=True)], "none", w=8),
        bargauge_panel(
            "Component shares (PostgreSQL)",
            "Share of $model's held GPU time in each component over the range, from the "
            "rollups (settled and unsettled).",
            [sql(f"""
                SELECT component, sum({TOTAL_US})::float8 / NULLIF(sum(sum({TOTAL_US})) OVER (), 0)
                  AS share
                FROM fleet_hourly
                WHERE $__timeFilter(hour) AND model = '$model'
                GROUP BY component
                ORDER BY 2 DESC""")],
            RATIO, ds=SQL, w=8),
        timeseries_panel(
            "Stalled GPU-hours",
            "GPU-hours per hour $model's jobs held while their steps did not advance for longer "
            "than their stall threshold (docs/model.md section 24), and how many jobs are "
            "stalled now.",
            [promql(f"(sum(rate(ett_stalled_gpu_seconds_total{{{M}}}[$__rate_interval])) * 3600)"
                    " or on() vector(0)", "stalled GPU-h/h"),
             promql(f"sum(ett_stalled_jobs{{{M}}})", "jobs stalled now", ref_id="B")],
            "none", w=24),
    ]


def _history() -> list[PanelBuilder]:
    return [
        timeseries_panel(
            "ETT% (PostgreSQL, any range)",
            "ETT of $model per interval from the hourly rollups; works past Prometheus "
            "retention.",
            [sql(ett_per_interval("$__timeFilter(hour) AND model = '$model'"),
                 fmt="time_series")],
            RATIO, ds=SQL, min_val=0, max_val=1, min_interval="1h"),
        bargauge_panel(
            "Level-1 terms (GPU-hours)",
            "held = effective + TTS + sum(TTR) + in-loop overhead + final shutdown, over the "
            "jobs of $model active in the range (whole jobs, GPU-weighted).",
            [sql(LEVEL1_SQL)], GPU_HOURS, ds=SQL, w=8),
        table_panel(
            "Failures (NoF) by cause",
            "Interruptions of the jobs of $model active in the range, by cause.",
            [sql(NOF_SQL)], w=4, h=8),
        table_panel(
            "Recent jobs",
            "The 50 most recent jobs of $model in the range: attempts, end causes, ETT.",
            [sql(RECENT_JOBS_SQL)], w=24, h=10),
        checkpoint_advice_panel(),
    ]


def build() -> dash_m.Dashboard:
    d = new_dashboard(UID, "ETT / Model",
                      "One model: ETT over time, where its GPU time goes, the Level-1 terms "
                      "and its recent jobs. See docs/dashboards.md.", ["model"], "now-7d")
    for v in [*datasource_variables(), team_variable(multi=True), model_variable(multi=False)]:
        d = d.with_variable(v)
    d = d.with_row(row("Now (Prometheus)"))
    for p in _stats() + _live():
        d = d.with_panel(p)
    d = d.with_row(row("Jobs and Level 1 (PostgreSQL)"))
    for p in _history():
        d = d.with_panel(p)
    d = d.annotation(changes_annotation('$team', "'$model'"))
    return assign_panel_ids(d.build())
