"""Every query the dashboards run, with Grafana's variables and macros filled in.

Tests feed these to `promtool` and to a migrated PostgreSQL; an end-to-end test can feed
`all_promql` to a Prometheus scraping a live service. The substitution follows what
Grafana does for the variables and macros these dashboards use, and fails loudly on any
other `$name`, so a new macro cannot slip past the tests unexpanded.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from .render import build_all

# Grafana's own interval variables, as a Prometheus duration, for a typical 7-day view.
DEFAULT_PROM_BUILTINS = {"__rate_interval": "5m", "__interval": "1m", "__range": "7d"}

_VAR = re.compile(r"\$(\{(\w+)(?::\w+)?\}|(\w+))")


def iter_targets(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(panel title, target) for every target of every panel, rows included."""
    for panel in doc.get("panels", []):
        for inner in [panel, *panel.get("panels", [])]:
            for target in inner.get("targets") or []:
                yield inner.get("title", ""), target


def _templating(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in doc.get("templating", {}).get("list", [])}


def _substitute(text: str, values: Mapping[str, str]) -> str:
    def repl(m: re.Match[str]) -> str:
        name = m.group(2) or m.group(3)
        if name not in values:
            raise KeyError(f"no value for ${name} in {text!r}")
        return values[name]

    return _VAR.sub(repl, text)


def all_promql(variables: Mapping[str, str],
               builtins: Mapping[str, str] = DEFAULT_PROM_BUILTINS) -> list[tuple[str, str, str]]:
    """[(dashboard uid, panel title, PromQL)] with `variables` (e.g. team, model) filled in.

    A multi-value variable gets the one value given, which is what a `=~` matcher sees
    when one item is picked.
    """
    values = {**builtins, **variables}
    out = []
    for doc in build_all().values():
        for title, target in iter_targets(doc):
            if "expr" in target:
                out.append((doc["uid"], title, _substitute(target["expr"], values)))
    return out


# ---- SQL -------------------------------------------------------------------------------


def _ts(t: datetime) -> str:
    return "'" + t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") + "'"


def _seconds(interval: str) -> int:
    m = re.fullmatch(r"'?(\d+)([smhdw])'?", interval.strip())
    if not m:
        raise ValueError(f"unsupported interval {interval!r}")
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[m.group(2)]


def expand_sql_macros(sql: str, time_from: datetime, time_to: datetime) -> str:
    """Expand the PostgreSQL datasource macros used here, as Grafana's sqleng does."""

    def time_filter(m: re.Match[str]) -> str:
        return f"{m.group(1).strip()} BETWEEN {_ts(time_from)} AND {_ts(time_to)}"

    def time_group_alias(m: re.Match[str]) -> str:
        n = _seconds(m.group(2))
        return f'floor(extract(epoch from {m.group(1).strip()})/{n})*{n} AS "time"'

    sql = re.sub(r"\$__timeFilter\(([^)]*)\)", time_filter, sql)
    sql = re.sub(r"\$__timeGroupAlias\(([^,]*),([^)]*)\)", time_group_alias, sql)
    sql = sql.replace("$__timeFrom()", _ts(time_from)).replace("$__timeTo()", _ts(time_to))
    return sql


def _sql_value(var: dict[str, Any], chosen: str | list[str]) -> str:
    # Grafana's SQL datasources quote every value of a multi/include-all variable and
    # join them with commas; a single-valued one is inserted raw with quotes doubled.
    if var.get("multi") or var.get("includeAll"):
        items = [chosen] if isinstance(chosen, str) else chosen
        return ",".join("'" + v.replace("'", "''") + "'" for v in items)
    # One variables mapping serves every dashboard: a single-valued one takes the first.
    one = chosen if isinstance(chosen, str) else chosen[0]
    return one.replace("'", "''")


def all_sql(variables: Mapping[str, str | list[str]], time_from: datetime | None = None,
            time_to: datetime | None = None, interval: str = "1h",
            include_variables: bool = True) -> list[tuple[str, str, str]]:
    """[(dashboard uid, panel title, SQL)] ready to run, variable queries included."""
    time_to = time_to or datetime.now(UTC)
    time_from = time_from or time_to - timedelta(days=7)
    out = []
    for doc in build_all().values():
        templating = _templating(doc)
        values = {name: _sql_value(var, variables[name])
                  for name, var in templating.items()
                  if var.get("type") == "query" and name in variables}
        # A text box is substituted raw (quotes doubled), its default unless given.
        values.update({name: str(variables.get(name, var.get("query", ""))).replace("'", "''")
                       for name, var in templating.items() if var.get("type") == "textbox"})
        values["__interval"] = interval
        queries = [(title, t["rawSql"]) for title, t in iter_targets(doc) if "rawSql" in t]
        queries += [(f"annotation {a['name']}", a["target"]["rawSql"])
                    for a in doc.get("annotations", {}).get("list", [])
                    if "rawSql" in (a.get("target") or {})]
        if include_variables:
            queries += [(f"variable {name}", var["query"]) for name, var in templating.items()
                        if var.get("type") == "query"]
        for title, raw in queries:
            text = expand_sql_macros(_substitute_sql_vars(raw, values), time_from, time_to)
            out.append((doc["uid"], title, text))
    return out


def _substitute_sql_vars(sql: str, values: Mapping[str, str]) -> str:
    # Macros ($__timeFilter(...) etc.) are left for expand_sql_macros; only variables here.
    def repl(m: re.Match[str]) -> str:
        name = m.group(2) or m.group(3)
        if name.startswith("__time"):
            return m.group(0)
        if name not in values:
            raise KeyError(f"no value for ${name} in {sql!r}")
        return values[name]

    return _VAR.sub(repl, sql)
