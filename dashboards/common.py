"""Building blocks shared by the four dashboards: datasources, variables, panels, queries.

Every dashboard reads two datasources, both chosen by variables so one JSON works in any
Grafana: ``${datasource}`` (Prometheus: live counters and gauges, short retention) and
``${sql_datasource}`` (the service's PostgreSQL: hourly rollups, jobs and attempts, kept
for the whole event-retention horizon). Panels say which one they read in their
description, and docs/dashboards.md explains the split.
"""

from __future__ import annotations

import typing
from typing import Any

from grafana_foundation_sdk.builders import bargauge, stat, table, timeseries
from grafana_foundation_sdk.builders import common as common_b
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus as prom_b
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.models import common as common_m
from grafana_foundation_sdk.models import dashboard as dash_m
from grafana_foundation_sdk.models import prometheus as prom_m

PROMETHEUS_TYPE = "prometheus"
# The PostgreSQL plugin's id since Grafana 10.2 (the old "postgres" id is an alias).
POSTGRES_TYPE = "grafana-postgresql-datasource"

PROM = dash_m.DataSourceRef(type_val=PROMETHEUS_TYPE, uid="${datasource}")
SQL = dash_m.DataSourceRef(type_val=POSTGRES_TYPE, uid="${sql_datasource}")

GPU_HOURS = "suffix: GPU-h"
RATIO = "percentunit"
SECONDS = "s"

# rollup tables store integer GPU-microseconds; panels show GPU-hours.
US_PER_HOUR = 3_600_000_000


# ---- queries ---------------------------------------------------------------------------


class SqlQuery(cogvariants.Dataquery):
    """A raw-SQL target of Grafana's PostgreSQL datasource.

    The SDK ships no model for that plugin; this one emits what Grafana's query editor saves
    in code mode, and the SDK reads it back as an ``UnknownDataquery`` with the same JSON.
    """

    def __init__(self, raw_sql: str, ref_id: str = "A", fmt: str = "table") -> None:
        self.raw_sql = raw_sql
        self.ref_id = ref_id
        self.fmt = fmt

    def to_json(self) -> dict[str, object]:
        return {
            "datasource": SQL.to_json(),
            "editorMode": "code",
            "format": self.fmt,
            "rawQuery": True,
            "rawSql": self.raw_sql,
            "refId": self.ref_id,
        }


class _SqlBuilder(cogbuilder.Builder[SqlQuery]):
    def __init__(self, query: SqlQuery) -> None:
        self._query = query

    def build(self) -> SqlQuery:
        return self._query


def sql(raw_sql: str, ref_id: str = "A", fmt: str = "table") -> cogbuilder.Builder[SqlQuery]:
    """A SQL target; ``fmt`` is "table" or "time_series" (needs a ``time`` column)."""
    return _SqlBuilder(SqlQuery(_dedent(raw_sql), ref_id, fmt))


def promql(expr: str, legend: str = "", ref_id: str = "A",
           instant: bool = False, table_format: bool = False) -> prom_b.Dataquery:
    q = prom_b.Dataquery().expr(_dedent(expr)).ref_id(ref_id)
    if legend:
        q = q.legend_format(legend)
    q = q.instant() if instant else q.range()
    if table_format:
        q = q.format(prom_m.PromQueryFormat.TABLE)
    return q


def _dedent(text: str) -> str:
    # Queries are written indented in the source; the JSON keeps them flush and trimmed.
    lines = [line.rstrip() for line in text.strip("\n").splitlines()]
    indent = min((len(x) - len(x.lstrip()) for x in lines if x.strip()), default=0)
    return "\n".join(x[indent:] for x in lines).strip()


# ---- variables -------------------------------------------------------------------------


def datasource_variables() -> list[cogbuilder.Builder[dash_m.VariableModel]]:
    return [
        dash.DatasourceVariable("datasource").label("Prometheus").type(PROMETHEUS_TYPE),
        dash.DatasourceVariable("sql_datasource").label("PostgreSQL").type(POSTGRES_TYPE),
    ]


def team_variable(multi: bool, include_owners: bool = False) -> dash.QueryVariable:
    # Read from `jobs`, not from Prometheus label values: the table holds every team seen
    # in the retention horizon, so picking a team that has been idle for a month still works.
    # A team's bill also covers teams that own components but no models (compiler, ...).
    sql = ("SELECT team FROM jobs UNION SELECT owner FROM settled_totals ORDER BY 1"
           if include_owners else "SELECT DISTINCT team FROM jobs ORDER BY 1")
    v = (dash.QueryVariable("team").label("Team").datasource(SQL)
         .query(sql)
         .refresh(dash_m.VariableRefresh.ON_DASHBOARD_LOAD)
         .sort(dash_m.VariableSort.ALPHABETICAL_ASC))
    if multi:
        v = v.multi(True).include_all(True)
    return v


def model_variable(multi: bool) -> dash.QueryVariable:
    v = (dash.QueryVariable("model").label("Model").datasource(SQL)
         .query("SELECT DISTINCT model FROM jobs WHERE team IN ($team) ORDER BY 1")
         .refresh(dash_m.VariableRefresh.ON_DASHBOARD_LOAD)
         .sort(dash_m.VariableSort.ALPHABETICAL_ASC))
    if multi:
        v = v.multi(True).include_all(True)
    return v


# ---- panels ----------------------------------------------------------------------------

PanelBuilder = cogbuilder.Builder[dash_m.Panel]


def _common(panel: Any, title: str, description: str, ds: dash_m.DataSourceRef,
            w: int, h: int, unit: str) -> Any:
    return panel.title(title).description(description).datasource(ds).span(w).height(h).unit(unit)


def timeseries_panel(title: str, description: str, targets: list[Any], unit: str,
                     ds: dash_m.DataSourceRef = PROM, w: int = 12, h: int = 8,
                     stacked: bool = False, bars: bool = False,
                     min_val: float | None = None, max_val: float | None = None,
                     min_interval: str | None = None) -> timeseries.Panel:
    p = _common(timeseries.Panel(), title, description, ds, w, h, unit)
    if min_interval:
        p = p.interval(min_interval)
    for t in targets:
        p = p.with_target(t)
    p = p.legend(common_b.VizLegendOptions().display_mode(common_m.LegendDisplayMode.TABLE)
                 .placement(common_m.LegendPlacement.RIGHT).show_legend(True)
                 .calcs(["mean", "lastNotNull"]))
    if stacked:
        stacking = common_b.StackingConfig().mode(common_m.StackingMode.NORMAL)
        p = p.stacking(stacking).fill_opacity(60)
    else:
        p = p.fill_opacity(10)
    if bars:
        p = p.draw_style(common_m.GraphDrawStyle.BARS).fill_opacity(80)
    if min_val is not None:
        p = p.min(min_val)
    if max_val is not None:
        p = p.max(max_val)
    return typing.cast(timeseries.Panel, p)


def stat_panel(title: str, description: str, targets: list[Any], unit: str,
               ds: dash_m.DataSourceRef = PROM, w: int = 4, h: int = 4,
               thresholds: list[tuple[float | None, str]] | None = None) -> stat.Panel:
    p = _common(stat.Panel(), title, description, ds, w, h, unit)
    for t in targets:
        p = p.with_target(t)
    p = p.graph_mode(common_m.BigValueGraphMode.NONE).reduce_options(
        common_b.ReduceDataOptions().calcs(["lastNotNull"]))
    if thresholds:
        p = p.thresholds(threshold_steps(thresholds)).color_mode(common_m.BigValueColorMode.VALUE)
    return typing.cast(stat.Panel, p)


def bargauge_panel(title: str, description: str, targets: list[Any], unit: str,
                   ds: dash_m.DataSourceRef = PROM, w: int = 12, h: int = 8) -> bargauge.Panel:
    p = _common(bargauge.Panel(), title, description, ds, w, h, unit)
    for t in targets:
        p = p.with_target(t)
    # A SQL table is one bar per row; a Prometheus instant vector is one bar per series.
    per_row = ds is SQL
    p = (p.display_mode(common_m.BarGaugeDisplayMode.BASIC)
         .orientation(common_m.VizOrientation.HORIZONTAL)
         .reduce_options(common_b.ReduceDataOptions().calcs(["lastNotNull"]).values(per_row)))
    return typing.cast(bargauge.Panel, p)


def table_panel(title: str, description: str, targets: list[Any], unit: str = "none",
                ds: dash_m.DataSourceRef = SQL, w: int = 24, h: int = 9) -> table.Panel:
    p = _common(table.Panel(), title, description, ds, w, h, unit)
    for t in targets:
        p = p.with_target(t)
    # Spelled out because the SDK fills these defaults in when it reads a table back.
    p = p.align(common_m.FieldTextAlignment.AUTO).inspect(False).filterable(True)
    return typing.cast(table.Panel, p)


def threshold_steps(steps: list[tuple[float | None, str]]) -> dash.ThresholdsConfig:
    """Absolute thresholds from (value, colour) pairs; the first value is None (base)."""
    return dash.ThresholdsConfig().mode(dash_m.ThresholdsMode.ABSOLUTE).steps(
        [dash_m.Threshold(value=v, color=c) for v, c in steps])


def row(title: str) -> dash.Row:
    return dash.Row(title)


def new_dashboard(uid: str, title: str, description: str, tags: list[str],
                  time_from: str) -> dash.Dashboard:
    return (dash.Dashboard(title).uid(uid).description(description)
            .tags(["ett", *tags]).time(time_from, "now").timezone("utc").refresh("1m")
            .editable().tooltip(dash_m.DashboardCursorSync.CROSSHAIR))


def assign_panel_ids(model: dash_m.Dashboard) -> dash_m.Dashboard:
    """Number panels 1..n in layout order: stable ids keep links to a panel working."""
    next_id = 1
    for panel in model.panels or []:
        panel.id_val = next_id
        next_id += 1
        for inner in getattr(panel, "panels", None) or []:
            inner.id_val = next_id
            next_id += 1
    return model


# ---- annotations -----------------------------------------------------------------------

def changes_annotation(team_list: str, model_list: str | None) -> cogbuilder.Builder[Any]:
    """Markers for the service's annotations (`POST /v1/annotations`), from the SQL source.

    `team_list` / `model_list` are SQL lists of the dashboard's picks (`$team` for a multi
    variable, `'$model'` for a single one). Fleet-wide annotations (no team) and ones with
    no model globs show on every view; a glob is matched like a token's model pattern.
    """
    models = "" if model_list is None else f"""
          AND (cardinality(models) = 0 OR EXISTS (
               SELECT 1 FROM unnest(models) AS p(glob),
                             unnest(ARRAY[{model_list}]::text[]) AS m(name)
               WHERE m.name LIKE
                     replace(replace(replace(p.glob, '_', '\\_'), '*', '%'), '?', '_')))"""
    raw = f"""
        SELECT ts AS "time", title || coalesce(': ' || text, '') AS text,
               array_to_string(tags, ',') AS tags
        FROM annotations
        WHERE $__timeFilter(ts)
          AND (team IS NULL OR team IN ({team_list})){models}
        ORDER BY ts"""
    # The SQL target goes where Grafana's annotation query reads it (`target`).
    return (dash.AnnotationQuery().name("Changes (ETT annotations)").datasource(SQL)
            .enable(True).icon_color("#8F3BB8").target(sql(raw, ref_id="Anno")))
