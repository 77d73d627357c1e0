"""`ett report`: the answers of the read API as tables for a terminal (`--json` for scripts).

It reads the database directly with the same functions the API's read routes use, so a
table and the matching endpoint always agree: the fleet (`/v1/ett`), `--by team|model`
(`/v1/ett?group_by=`), `--team T --bill` (`/v1/teams/T/bill`), `--job ID`
(`/v1/jobs/ID`).
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from service.console.formats import seconds as duration

from .failures import UsageProblem

GPU_H = 3600.0


def _pct(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{100 * ratio:.1f}%"


def _hours(gpu_seconds: float) -> str:
    return f"{gpu_seconds / GPU_H:,.1f}"


def scope_of(model: str | None, team: str | None) -> str:
    """What the one row of an ungrouped report covers."""
    parts = [f"team {team}" if team else "", f"model {model}" if model else ""]
    return ", ".join(p for p in parts if p) or "fleet"


def _ett_table(answer: dict[str, Any], title: str, key_name: str, scope: str) -> Table:
    table = Table(title=title, title_justify="left")
    for name, justify in ((key_name, "left"), ("held GPU-h", "right"), ("ETT", "right"),
                          ("effective GPU-h", "right"), ("at risk GPU-h", "right"),
                          ("unreported", "right"), ("queue h", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for g in answer["groups"]:
        table.add_row(str(g["key"] if g["key"] is not None else scope),
                      _hours(g["held_gpu_seconds"]), _pct(g["ett_ratio"]),
                      _hours(g["effective_gpu_seconds"]), _hours(g["at_risk_gpu_seconds"]),
                      _pct(g.get("unreported_ratio")), f"{g.get('queue_seconds', 0) / 3600:,.1f}")
    return table


def _share_table(answer: dict[str, Any], title: str, key_name: str) -> Table:
    """`--by component|owner`: each row is a slice of the held time, so what it means is its
    GPU-hours and its share of the held total (an ETT per component would be 100 % for
    effective_training and 0 % for the rest)."""
    held = sum(g["held_gpu_seconds"] for g in answer["groups"])
    table = Table(title=title, title_justify="left")
    table.add_column(key_name)
    table.add_column("GPU-h", justify="right")
    table.add_column("share of held", justify="right")
    for g in sorted(answer["groups"], key=lambda g: -g["held_gpu_seconds"]):
        table.add_row(str(g["key"]), _hours(g["held_gpu_seconds"]),
                      _pct(g["held_gpu_seconds"] / held if held else None))
    return table


def _components_table(components: dict[str, float], held: float, unit: str) -> Table:
    table = Table(title="where the held time went", title_justify="left")
    table.add_column("component")
    table.add_column(unit, justify="right")
    table.add_column("share", justify="right")
    for name, value in sorted(components.items(), key=lambda kv: -kv[1]):
        shown = _hours(value) if unit == "GPU-h" else duration(value)
        table.add_row(name, shown, _pct(value / held if held else None))
    return table


def _bill_tables(bill: dict[str, Any]) -> list[Table]:
    tables = []
    for what in ("phase", "model"):
        table = Table(title=f"by {what}", title_justify="left")
        table.add_column(what)
        table.add_column("lost GPU-h", justify="right")
        for name, hours in bill[f"by_{what}"].items():
            table.add_row(name, f"{hours:,.1f}")
        tables.append(table)
    return tables


def _instant(value: Any, day: str) -> str:
    """A time of day (with milliseconds) when the instant falls on `day`, else the date too:
    the attempts table stays within 80 columns."""
    if value is None:
        return "-"
    at = datetime.fromisoformat(str(value)).astimezone(UTC)
    clock = f"{at:%H:%M:%S}.{at.microsecond // 1000:03d}"
    return clock if f"{at:%Y-%m-%d}" == day else f"{at:%m-%d} {clock}"


def _job_tables(job: dict[str, Any]) -> list[Table]:
    first = job["attempts"][0]["allocated_at"] if job["attempts"] else None
    day = f"{datetime.fromisoformat(str(first)).astimezone(UTC):%Y-%m-%d}" if first else ""
    attempts = Table(title=f"attempts (UTC, {day})" if day else "attempts",
                     title_justify="left", box=box.SIMPLE_HEAD)
    for name in ("#", "allocated", "released", "gpus", "end cause", "held", "startup"):
        attempts.add_column(name, no_wrap=True,
                            justify="right" if name in ("gpus", "held", "startup") else "left")
    for a in job["attempts"]:
        attempts.add_row(str(a["attempt"]), _instant(a["allocated_at"], day),
                         _instant(a["released_at"], day), str(a["gpus"]), a["end_cause"],
                         duration(a["held_seconds"]), duration(a["startup_seconds"]))
    l1 = job["level1"]
    level1 = Table(title="Level 1", title_justify="left")
    level1.add_column("term")
    level1.add_column("time", justify="right")
    level1.add_row("effective", duration(job["effective_seconds"]))
    level1.add_row("TTS", duration(l1["tts_seconds"]))
    level1.add_row(f"TTR (NoF {l1['nof']})", duration(sum(l1["ttr_seconds"])))
    level1.add_row("in-loop overhead", duration(l1["in_loop_overhead_seconds"]))
    level1.add_row("final shutdown", duration(l1["final_shutdown_seconds"]))
    tables = [attempts, _components_table(job["components"], job["held_seconds"], "time"),
              level1]
    if any(a.get("held_by") == "scheduler" for a in job["attempts"]):
        tables.insert(1, _scheduler_table(job))
    return tables


def _scheduler_table(job: dict[str, Any]) -> Table:
    """Whose instants bound each attempt, and its queue time (docs/model.md section 25)."""
    table = Table(title="the scheduler's word", title_justify="left", box=box.SIMPLE_HEAD)
    for name in ("#", "held by", "trainer", "queued", "unreported"):
        table.add_column(name, no_wrap=True,
                         justify="right" if name in ("queued", "unreported") else "left")
    for a in job["attempts"]:
        table.add_row(str(a["attempt"]), a.get("held_by", "trainer"),
                      "reported" if a.get("instrumented", True) else "none (uninstrumented)",
                      duration(a.get("queue_seconds") or 0), "")
    table.add_row("job", "", "", duration(job.get("queue_seconds") or 0),
                  _pct(job.get("unreported_ratio")))
    return table


def _answer(args: argparse.Namespace, engine: Any) -> tuple[dict[str, Any], list[Any]]:
    from service.errors import NotFound
    from service.results import windows
    from service.results.jobs import job_result

    now = datetime.now(UTC)
    if args.job:
        job = job_result(engine, args.job)
        if job is None:
            raise NotFound(f"job {args.job!r} is unknown or not aggregated yet"
                           " (`ett aggregate` runs a pass)")
        head = (f"job {job['job_id']} ({job['model']}, team {job['team']}): {job['state']},"
                f" ETT {_pct(job['ett_ratio'])}, held {duration(job['held_seconds'])},"
                f" effective {duration(job['effective_seconds'])}")
        return job, [head, *_job_tables(job)]
    default = timedelta(days=7) if args.bill else timedelta(days=1)
    start, end = windows.parse_window(args.start, args.end, now, default=default)
    window = f"{start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC"
    if args.bill:
        bill = windows.team_bill(engine, args.team, start, end)
        head = (f"{args.team} bill: {bill['lost_gpu_hours']:,.1f} lost GPU-hours the team"
                f" owns, {window}")
        return bill, [head, *_bill_tables(bill), bill.get("note", "")]
    group_by = args.by or "none"
    answer = windows.ett_window(engine, start, end, group_by, args.model, args.team)
    if args.by in ("component", "owner"):
        title = f"held GPU-hours by {args.by}, {window}"
        return answer, [_share_table(answer, title, args.by), answer.get("note", "")]
    scope = scope_of(args.model, args.team)
    shown: list[Any] = [_ett_table(answer, f"ETT, {window}", args.by or "scope", scope)]
    if not args.by:
        fleet = answer["groups"][0]
        shown.append(_components_table(fleet["components"], fleet["held_gpu_seconds"], "GPU-h"))
    return answer, [*shown, answer.get("note", "")]


def _run(args: argparse.Namespace) -> int:
    from service.store.engine import open_database

    if args.bill and not args.team:
        raise UsageProblem("--bill needs --team TEAM (the team whose lost GPU-hours to list)")
    if args.job and (args.by or args.bill or args.team or args.model):
        raise UsageProblem("--job shows one job; leave out --by, --team, --model and --bill")
    with open_database(args.settings, pool_size=1) as db:
        answer, shown = _answer(args, db.engine)
    if args.json:
        print(json.dumps(answer, indent=2, default=str))
        return 0
    console = Console()
    for item in shown:
        if item:
            # Sentences are not wrapped (a script may grep them); tables fit the terminal.
            console.print(item, soft_wrap=isinstance(item, str))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("report", help="ETT tables: fleet, by team or model, a team's"
                                             " bill, one job")
    p.add_argument("--by", choices=("team", "model", "component", "owner"), default=None,
                   help="one row per team, model, component or owner")
    p.add_argument("--team", default=None, help="only this model team (with --bill: its bill)")
    p.add_argument("--model", default=None, help="only this model")
    p.add_argument("--bill", action="store_true",
                   help="the lost GPU-hours --team owns, by phase and model (last 7 days)")
    p.add_argument("--job", default=None, metavar="ID", help="one job: attempts, components,"
                                                             " Level 1")
    p.add_argument("--start", default=None, help="RFC 3339; default: end minus 1 day (7 for"
                                                 " --bill)")
    p.add_argument("--end", default=None, help="RFC 3339; default: now")
    p.add_argument("--json", action="store_true", help="the API's JSON instead of tables")
    p.set_defaults(func=_run)
