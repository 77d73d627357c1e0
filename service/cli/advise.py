"""`ett advise checkpoints`: every model's observed and recommended checkpoint intervals,
the expected ETT at each, and the projected saving, largest saving first."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from service.results.checkpoint_advice import fleet_checkpoint_advice
from service.store.engine import open_database
from service.wire.event import WireError, parse_rfc3339

from .failures import UsageProblem

COLUMNS = ("model", "team", "status", "failures", "mtbf_h", "save_s", "restart_s",
           "observed_min", "daly_min", "ettr_obs", "ettr_daly", "saving_gpu_h/day")


def _num(value: float | None, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if value is None else f"{value / scale:.{digits}f}"


def table_rows(advice: Sequence[dict[str, Any]]) -> list[tuple[str, ...]]:
    rows = []
    for a in advice:
        interval, ettr = a["interval_seconds"], a["expected_ettr"]
        rows.append((
            a["model"], a["team"], a["status"], str(a["interruptions"]),
            _num(a["mtbf_seconds"], 3600), _num(a["checkpoint_cost_seconds"]),
            _num(a["restart_overhead_seconds"]), _num(interval["observed"], 60),
            _num(interval["daly"], 60), _num(ettr["observed"], digits=3),
            _num(ettr["daly"], digits=3),
            _num(a["projected_saving_gpu_hours_per_day"], digits=2),
        ))
    return rows


def render_table(advice: Sequence[dict[str, Any]]) -> str:
    """A plain aligned table (numbers right-aligned), then each model's reason, if any."""
    rows = [COLUMNS, *table_rows(advice)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(w) if i < 3 else cell.rjust(w)
                       for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip()
             for row in rows]
    notes = [f"{a['model']}: {a['reason']}" for a in advice if a["reason"]]
    return "\n".join(lines + (["", *notes] if notes else []))


def _window(args: argparse.Namespace) -> tuple[datetime, datetime]:
    end = parse_rfc3339(args.end, "end") if args.end else datetime.now(UTC)
    start = (parse_rfc3339(args.start, "start") if args.start
             else end - timedelta(days=args.days))
    if end <= start:
        raise WireError(f"end: must be after start ({start.isoformat()})")
    return start, end


def _checkpoints(args: argparse.Namespace) -> int:
    try:
        start, end = _window(args)
    except WireError as exc:
        raise UsageProblem(str(exc)) from None
    with open_database(args.settings, pool_size=1) as db:
        advice = fleet_checkpoint_advice(db.engine, start, end, model_glob=args.model,
                                         team=args.team)
    if args.json:
        print(json.dumps({"start": start.isoformat(), "end": end.isoformat(),
                          "models": advice}, indent=2))
    elif not advice:
        print(f"no attempts started between {start.isoformat()} and {end.isoformat()}"
              " for the models asked (attempts posted since the aggregator's last pass are"
              " not aggregated yet: `ett aggregate` runs one)")
    else:
        print(render_table(advice))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("advise", help="advice computed from what the fleet showed")
    sub = p.add_subparsers(dest="advice", required=True)
    c = sub.add_parser("checkpoints", help="observed vs recommended checkpoint intervals, by"
                       " projected GPU-hours a day saved (docs/checkpoints.md)")
    c.add_argument("--model", default=None, help="models matching this glob (e.g. 'llama-*')")
    c.add_argument("--team", default=None, help="models of this team")
    c.add_argument("--days", type=float, default=30.0,
                   help="window length ending at --end (default 30)")
    c.add_argument("--start", default=None, help="window start (RFC 3339; default end - days)")
    c.add_argument("--end", default=None, help="window end (RFC 3339; default now)")
    c.add_argument("--json", action="store_true", help="the advice documents as JSON")
    c.set_defaults(func=_checkpoints)
