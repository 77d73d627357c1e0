"""`ett impact`, `ett whatif`, `ett annotate`: the impact endpoints from the command line.

They talk to a running service over HTTP (like `ett demo`), so a writer's annotation is
checked by the same rules as through the API.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import httpx

from ett_core.impact import OVERHEAD_TERMS, SHRINKABLE
from ett_core.taxonomy import COMPONENTS

from .failures import UsageProblem, token_of


def _call(args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> dict | None:
    token = token_of(args, args.command)
    try:
        response = httpx.request(method, args.url.rstrip("/") + path, timeout=30,
                                 headers={"Authorization": f"Bearer {token}"}, **kwargs)
    except httpx.HTTPError as exc:
        print(f"ett {args.command}: cannot reach {args.url}: {exc}", file=sys.stderr)
        return None
    if response.status_code >= 400:
        try:
            detail = response.json().get("detail") or response.text
        except ValueError:
            detail = response.text
        print(f"ett {args.command}: {response.status_code} {detail}", file=sys.stderr)
        return None
    return response.json()


_TERM_HEADERS = {"tts": "TTS", "ttr": "TTR", "in_loop_overhead": "in-loop",
                 "final_shutdown": "final shutdn"}


def _num(value: float | None, fmt: str = "{:,.0f}") -> str:
    return "-" if value is None else fmt.format(value)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def impact_table(doc: dict[str, Any]) -> str:
    """The readable form of a `/v1/impact` document: cohorts, then savings by term and
    component (GPU-hours), then the credit figures."""
    b, c, s = doc["baseline"], doc["candidate"], doc["savings"]
    lines = [f"{'':28}{'baseline':>14}{'candidate':>14}"]
    for label, key, fmt in (("jobs", "jobs", "{:,.0f}"),
                            ("running (left out)", "running_excluded", "{:,.0f}"),
                            ("held GPU-hours", "held_gpu_seconds", "{:,.1f}"),
                            ("ETT", "ett_ratio", None), ("failures", "nof", "{:,.0f}"),
                            ("mean TTS (s)", "mean_tts_seconds", "{:,.0f}"),
                            ("mean TTR (s)", "mean_ttr_seconds", "{:,.0f}")):
        bv, cv = b[key], c[key]
        if key == "held_gpu_seconds":
            bv, cv = bv / 3600, cv / 3600
        cells = [_pct(v) if fmt is None else _num(v, fmt) for v in (bv, cv)]
        lines.append(f"{label:28}{cells[0]:>14}{cells[1]:>14}")
    lines.append(f"ETT change: {_num(doc['delta_ett_pp'], '{:+.2f}')} points")
    lines.append("")
    lines.append("savings (GPU-hours; negative: a regression)")
    header = "".join(f"{_TERM_HEADERS[t]:>13}" for t in OVERHEAD_TERMS)
    lines.append(f"{'component':18}{header}{'total':>13}")
    by_tc = s["by_term_component"]
    for comp in COMPONENTS:
        row = "".join(f"{_num(_hours(by_tc[t][comp]), '{:,.1f}'):>13}" for t in OVERHEAD_TERMS)
        lines.append(f"{comp:18}{row}{_num(_hours(s['by_component'][comp]), '{:,.1f}'):>13}")
    totals = "".join(f"{_num(_hours(s['by_term'][t]), '{:,.1f}'):>13}" for t in OVERHEAD_TERMS)
    lines.append(f"{'total':18}{totals}{_num(_hours(s['total_gpu_seconds']), '{:,.1f}'):>13}")
    lines.append("")
    credit = doc["startup_credit"]
    lines.append(f"recovery share {_pct(doc['recovery_share'])}; startup credit direct"
                 f" {_pct(credit['direct'])}, with the restart cascade {_pct(credit['cascade'])};"
                 f" TTR fell {_num(doc['ttr_to_tts_reduction'], '{:.2f}')}x as much as TTS")
    return "\n".join(lines)


def _hours(seconds: float | None) -> float | None:
    return None if seconds is None else seconds / 3600


_HOW_TO_COMPARE = (
    "pass two labels (--baseline-label variant:baseline --candidate-label variant:optimized),"
    " two periods (--baseline-start/--baseline-end and --candidate-start/--candidate-end),"
    " or --around ANNOTATION_ID")
NOT_AGGREGATED = ("jobs posted since the last aggregation pass are not aggregated yet: run"
                  " `ett aggregate` or wait for the aggregator (ETT_AGGREGATE_INTERVAL_S,"
                  " 30 s by default)")


def _same_cohorts(args: argparse.Namespace) -> bool:
    """True when the call would compare a cohort with itself (the API takes a missing side's
    bounds from the other side)."""
    if args.around is not None:
        return False
    b = (args.baseline_start or args.candidate_start, args.baseline_end or args.candidate_end)
    c = (args.candidate_start or args.baseline_start, args.candidate_end or args.baseline_end)
    return b == c and sorted(args.baseline_label) == sorted(args.candidate_label)


def _filters(args: argparse.Namespace, side: str) -> str:
    shown = [f"--{k} {v}" for k, v in (("model", args.model), ("team", args.team)) if v]
    shown += [f"--{side}-label {v}" for v in getattr(args, f"{side}_label")]
    return " ".join(shown) or "no filter"


def _span(cohort: dict[str, Any]) -> str:
    sel = cohort.get("selector") or {}
    return f"{str(sel.get('start', '?'))[:16]} to {str(sel.get('end', '?'))[:16]} UTC"


def empty_cohorts(doc: dict[str, Any], args: argparse.Namespace) -> str | None:
    """Why the comparison is empty, or None: a side without ended jobs compares nothing."""
    empty = [side for side in ("baseline", "candidate") if not doc[side]["jobs"]]
    if not empty:
        return None
    sides = " and the ".join(f"{side} ({_filters(args, side)}, {_span(doc[side])})"
                             for side in empty)
    running = sum(doc[side].get("running_excluded") or 0 for side in empty)
    also = f"; {running} running job(s) matched, and only ended jobs count" if running else ""
    return (f"no ended job matched the {sides}{also}. Check --model (a glob, e.g. 'ads_*';"
            f" `ett report --by model` lists them), --team and the labels; {NOT_AGGREGATED}")


def _cmd_impact(args: argparse.Namespace) -> int:
    if _same_cohorts(args):
        raise UsageProblem("the baseline and the candidate are the same cohort (same window,"
                           " same labels), so there is nothing to compare; " + _HOW_TO_COMPARE)
    params: list[tuple[str, Any]] = [(k, v) for k, v in (
        ("baseline_start", args.baseline_start), ("baseline_end", args.baseline_end),
        ("candidate_start", args.candidate_start), ("candidate_end", args.candidate_end),
        ("model", args.model), ("team", args.team), ("around", args.around),
        ("days", args.days)) if v is not None]
    params += [("baseline_label", v) for v in args.baseline_label]
    params += [("candidate_label", v) for v in args.candidate_label]
    doc = _call(args, "GET", "/v1/impact", params=params)
    if doc is None:
        return 1
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    why = empty_cohorts(doc, args)
    if why is not None:
        print(f"ett impact: {why}", file=sys.stderr)
        return 1
    print(impact_table(doc))
    return 0


def _cmd_whatif(args: argparse.Namespace) -> int:
    params: list[tuple[str, Any]] = [(k, v) for k, v in (
        ("start", args.start), ("end", args.end), ("model", args.model), ("team", args.team),
        ("component", args.component), ("reduction", args.reduction)) if v is not None]
    params += [("label", v) for v in args.label]
    doc = _call(args, "GET", "/v1/whatif", params=params)
    if doc is None:
        return 1
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    if not doc["cohort"]["jobs"]:
        print(f"ett whatif: no ended job matched the cohort ({_span(doc['cohort'])});"
              f" check --model, --team and --label; {NOT_AGGREGATED}", file=sys.stderr)
        return 1
    saved, proj = doc["gpu_seconds_saved"], doc["projected_ett_ratio"]
    print(f"cohort: {doc['cohort']['jobs']} jobs, ETT {_pct(doc['ett_ratio'])}")
    print(f"{doc['component']} shrunk by {100 * doc['reduction']:.0f}%:")
    print(f"  direct (first start only): ETT {_pct(proj['direct'])},"
          f" {saved['direct'] / 3600:,.1f} GPU-hours saved")
    print(f"  cascade (every restart too): ETT {_pct(proj['cascade'])},"
          f" {saved['cascade'] / 3600:,.1f} GPU-hours saved")
    return 0


def _cmd_annotate(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"title": args.title}
    for key in ("ts", "text", "team"):
        if getattr(args, key) is not None:
            body[key] = getattr(args, key)
    models = [m.strip() for arg in args.models for m in arg.split(",") if m.strip()]
    if models:
        body["models"] = models
    if args.tag:
        body["tags"] = args.tag
    doc = _call(args, "POST", "/v1/annotations", json=body)
    if doc is None:
        return 1
    print(f"annotation {doc['id']}")
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", default="http://127.0.0.1:8080", help="the service's base URL")
    p.add_argument("--token", default=None, help="a token (default: the admin token)")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("impact", help="what a change gained: baseline vs candidate")
    _common(p)
    for side in ("baseline", "candidate"):
        p.add_argument(f"--{side}-start")
        p.add_argument(f"--{side}-end")
        p.add_argument(f"--{side}-label", action="append", default=[], metavar="KEY:VALUE")
    p.add_argument("--model", help="a model glob, e.g. ads_*")
    p.add_argument("--team")
    p.add_argument("--around", type=int, help="an annotation id: N days before vs after")
    p.add_argument("--days", type=float, help="with --around (default 7)")
    p.add_argument("--json", action="store_true", help="the API's document as is")
    p.set_defaults(func=_cmd_impact)

    w = subparsers.add_parser("whatif", help="projected ETT if a component shrank")
    _common(w)
    w.add_argument("--component", required=True, choices=SHRINKABLE)
    w.add_argument("--reduction", type=float, required=True, help="a fraction in [0, 1]")
    w.add_argument("--start")
    w.add_argument("--end")
    w.add_argument("--model")
    w.add_argument("--team")
    w.add_argument("--label", action="append", default=[], metavar="KEY:VALUE")
    w.add_argument("--json", action="store_true")
    w.set_defaults(func=_cmd_whatif)

    a = subparsers.add_parser("annotate", help="mark a change on the dashboards")
    _common(a)
    a.add_argument("title")
    a.add_argument("--ts", help="RFC 3339 (default: now)")
    a.add_argument("--text")
    a.add_argument("--team")
    a.add_argument("--models", action="append", default=[], help="model globs, comma-separated")
    a.add_argument("--tag", action="append", default=[])
    a.set_defaults(func=_cmd_annotate)
