"""The team dashboard's impact view: two labelled cohorts of the team's jobs over the
dashboard range, their savings by Level-1 term and component, and the startup credit
direct vs with the restart cascade (the figures of `GET /v1/impact`, docs/impact.md).

The cohorts are read from `job_impact` (what the aggregator stores per job): jobs of
models whose team is `$team`, first allocated in the range, ended, carrying the label
`$baseline_label` / `$candidate_label` (`key:value`; empty: any), the baseline's range
moved back by `$baseline_shift` (a PostgreSQL interval: `7 days` compares this week with
the last).
"""

from __future__ import annotations

from typing import Any

from grafana_foundation_sdk.builders import dashboard as dash

from .common import PanelBuilder, sql, table_panel

# As in ett_core.impact and the job_impact columns (tests/dashboards check they agree).
OVERHEAD_TERMS = ("tts", "ttr", "in_loop_overhead", "final_shutdown")
STARTUP_COMPONENTS = ("scheduling", "initialization", "compilation")
COMPONENTS = ("scheduling", "initialization", "compilation", "effective_training",
              "wasted_training", "shutdown", "unattributed")

# Two labels over the range, or (empty labels, a shift) the range against an earlier one.
VARIABLES = {"baseline_label": "variant:baseline", "candidate_label": "variant:optimized",
             "baseline_shift": "0 days"}
_CELLS = [(t, c) for t in OVERHEAD_TERMS for c in COMPONENTS]


def label_variables() -> list[Any]:
    return [dash.TextBoxVariable(name).label(name.replace("_", " ").capitalize())
            .default_value(value) for name, value in VARIABLES.items()]


def _cohort(name: str, variable: str) -> str:
    # `key:value` -> {"key": "value"}: the value may itself hold colons; empty: any labels.
    v = f"'${variable}'"
    pick = (f"({v} = '' OR labels @> jsonb_build_object("
            f"split_part({v}, ':', 1), substr({v}, strpos({v}, ':') + 1)))")
    # The baseline's range is the dashboard's, moved back by $baseline_shift.
    shift = "interval '$baseline_shift'" if name == "b" else "interval '0 days'"
    window = (f"first_at >= ($__timeFrom())::timestamptz - {shift}"
              f" AND first_at < ($__timeTo())::timestamptz - {shift}")
    sums = ",\n".join(f"sum({t}_{c}_gpu_us)::float8 AS {t}_{c}" for t, c in _CELLS)
    return f"""{name} AS (
    SELECT sum(effective_gpu_us)::float8 AS e,
{sums}
    FROM job_impact
    WHERE {window} AND team = '$team' AND NOT running
      AND {pick})"""


def _savings_sql(select: str) -> str:
    values = ",\n".join(f"('{t}', '{c}', b.{t}_{c}, c.{t}_{c})" for t, c in _CELLS)
    # savings = (O_B / E_B - O_C / E_C) * E_C, in GPU-hours; null when a cohort did no work.
    return f"""
WITH {_cohort("b", "baseline_label")},
{_cohort("c", "candidate_label")},
s AS (
    SELECT v.term, v.component,
           (v.ob / NULLIF(b.e, 0) - v.oc / NULLIF(c.e, 0)) * c.e / 3.6e9 AS saved
    FROM b, c, LATERAL (VALUES {values}) AS v(term, component, ob, oc))
{select}"""


BY_TERM_COMPONENT = _savings_sql("""
SELECT component,
""" + ",\n".join(f"sum(saved) FILTER (WHERE term = '{t}') AS \"{t}\"" for t in OVERHEAD_TERMS)
    + """,
       sum(saved) AS "total"
FROM s GROUP BY component ORDER BY component""")

_S = ", ".join(f"'{c}'" for c in STARTUP_COMPONENTS)
CREDIT = _savings_sql(f"""
SELECT sum(saved) AS "saved GPU-hours",
       sum(saved) FILTER (WHERE term = 'ttr') / NULLIF(sum(saved), 0) AS "recovery share",
       sum(saved) FILTER (WHERE term = 'tts' AND component IN ({_S}))
         / NULLIF(sum(saved), 0) AS "startup credit, direct",
       sum(saved) FILTER (WHERE term IN ('tts', 'ttr') AND component IN ({_S}))
         / NULLIF(sum(saved), 0) AS "startup credit, with cascade"
FROM s""")


def panels() -> list[PanelBuilder]:
    return [
        table_panel(
            "Impact: savings by term and component (GPU-hours)",
            "Jobs of $team first allocated in the range labelled $candidate_label, against "
            "those labelled $baseline_label first allocated in the range moved back by "
            "$baseline_shift (an empty label takes every job): the overhead the candidate "
            "avoided for the useful work it did, (O_B/E_B - O_C/E_C) * E_C per Level-1 term "
            "and component. Negative: a regression. See docs/impact.md.",
            [sql(BY_TERM_COMPONENT)], w=16, h=9),
        table_panel(
            "Impact: who gets the credit",
            "Total savings, the share from recovery (TTR), and the startup components' "
            "share counted at first start only (direct) or at every restart too (cascade).",
            [sql(CREDIT)], w=8, h=9),
    ]
