"""Checkpoint advice panels: observed vs recommended interval and the projected saving.

Grafana reads PostgreSQL directly, so the advice is restated here in SQL over
`checkpoint_attempts`: the same sums, the same Daly and Kokolis formulas and the same
insufficient-data rules as ett_core.checkpoint_advice (docs/checkpoints.md), over the
attempts that started in the dashboard's range. tests/dashboards/test_dashboards_sql.py
checks that the two agree.
"""

from __future__ import annotations

from typing import Any

from .common import SQL, sql, table_panel


def advice_sql(where: str, limit: int | None = None) -> str:
    """One row per model with attempts in the range: its advice, or why there is none."""
    window = ("started_at >= $__timeFrom()::timestamptz"
              f" AND started_at < $__timeTo()::timestamptz AND {where}")
    # The window is scanned twice, not shared through a CTE that PostgreSQL would
    # materialise whole (arrays included).
    return f"""
        WITH med AS (
          SELECT model, percentile_cont(0.5) WITHIN GROUP (ORDER BY i) / 1e6 AS tau
          FROM checkpoint_attempts, unnest(intervals_us) AS i
          WHERE {window}
          GROUP BY model
        ), s AS (
          SELECT model, (array_agg(team ORDER BY started_at DESC))[1] AS team,
                 count(*) FILTER (WHERE interrupted) AS n, sum(held_us)::float8 / 1e6 AS held_s,
                 sum(held_us::float8 * gpus) / 3.6e9 AS held_gpu_h,
                 sum(blocking_save_us)::float8 / 1e6 AS save_s, sum(durable_checkpoints) AS ckpts,
                 coalesce(sum(ttr_us) FILTER (WHERE interrupted), 0)::float8 / 1e6 AS ttr_s,
                 coalesce(sum(lost_progress_us) FILTER (WHERE interrupted), 0)::float8
                   / 1e6 AS lost_s
          FROM checkpoint_attempts
          WHERE {window}
          GROUP BY model
        ), p AS (
          SELECT s.*, med.tau,
                 CASE WHEN n < 3 THEN n || ' interruption(s) in the range; at least 3 are needed'
                      WHEN ckpts = 0 THEN 'no durable checkpoints in the range'
                      WHEN save_s <= 0 THEN 'no blocking checkpoint_save time reported'
                 END AS reason,
                 held_s / NULLIF(n, 0) AS m, save_s / NULLIF(ckpts, 0) AS d,
                 greatest(0, (ttr_s - lost_s) / NULLIF(n, 0)) AS r
          FROM s LEFT JOIN med ON med.model = s.model
        ), q AS (
          SELECT p.*, CASE WHEN reason IS NOT NULL THEN NULL
                           WHEN d < 2 * m THEN sqrt(2 * d * m)
                                * (1 + sqrt(d / (2 * m)) / 3 + d / (2 * m) / 9) - d
                           ELSE m END AS daly
          FROM p
        ), e AS (
          SELECT q.*, greatest(0, 1 - (r + tau / 2) / m) / (1 + d / tau) AS ettr_obs,
                 greatest(0, 1 - (r + daly / 2) / m) / (1 + d / daly) AS ettr_daly
          FROM q
        )
        SELECT model, team, CASE WHEN daly IS NULL THEN 'insufficient_data' ELSE 'ok' END
                 AS status,
               n AS interruptions, m / 3600 AS "MTBF h", d AS "save s", r AS "restart s",
               tau / 60 AS "observed min", daly / 60 AS "recommended min",
               ettr_obs AS "ETT at observed", ettr_daly AS "ETT at recommended",
               (ettr_daly - ettr_obs) * held_gpu_h
                 / (extract(epoch FROM $__timeTo()::timestamptz - $__timeFrom()::timestamptz)
                    / 86400) AS "saving GPU-h/day",
               reason
        FROM e
        ORDER BY "saving GPU-h/day" DESC NULLS LAST, model
        {f"LIMIT {limit}" if limit else ""}"""


def model_panel() -> Any:
    return table_panel(
        "Checkpoint advice",
        "Observed vs recommended (Daly) checkpoint interval of $model, the expected ETT at "
        "each and the projected GPU-hours a day saved, from the attempts that started in "
        "the range; or why there is no advice. See docs/checkpoints.md.",
        [sql(advice_sql("model = '$model'"))], ds=SQL, w=24, h=5)


def fleet_panel() -> Any:
    return table_panel(
        "Checkpoint advice: largest projected savings",
        "For the checkpointing team (owner of checkpoint_save): the models whose change to "
        "the recommended checkpoint interval would save the most GPU-hours a day, from the "
        "attempts that started in the range. See docs/checkpoints.md.",
        [sql(advice_sql("team IN ($team) AND model IN ($model)", limit=20))], ds=SQL,
        w=24, h=8)
