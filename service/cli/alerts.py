"""`ett rules` and `ett alertmanager-config`: the only code here that writes files.

service/cli/__init__.py builds the parser and calls ``register(subparsers)``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from service.alerts import (
    ALERTMANAGER_HEADER,
    GENERATED_HEADER,
    dump_yaml,
    render_alertmanager_config,
    render_rule_files,
)
from service.slo.load import check_teams_known, load_slo_spec, load_teams
from service.slo.model import SpecError, parse_duration
from service.taxonomy import TaxonomyError, load_taxonomy

DEFAULT_SPEC = Path("deploy/slo.yaml")
DEFAULT_TEAMS = Path("deploy/teams.yaml")
DEFAULT_TAXONOMY = Path("deploy/taxonomy.yaml")
DEFAULT_RULES_DIR = Path("deploy/prometheus/rules")
DEFAULT_ALERTMANAGER = Path("deploy/alertmanager/alertmanager.yml")
RULES_SUFFIX = ".rules.yaml"


def rule_texts(spec_path: Path, teams_path: Path | None, window_scale: float = 1.0,
               min_window_s: int = 60, taxonomy_path: Path | None = None) -> dict[str, str]:
    """File name -> exact text `ett rules` writes (the golden test uses this too)."""
    spec = load_slo_spec(spec_path)
    # The stall alert pages the taxonomy's stall owner (the default one without a file).
    stall = {} if taxonomy_path is None else {
        "stall_owner": load_taxonomy(taxonomy_path).stall_owner}
    if teams_path is not None:
        check_teams_known(spec, load_teams(teams_path), source=str(spec_path))
    header = GENERATED_HEADER
    if window_scale != 1.0:
        header += f"# Windows scaled by {window_scale:g} for an end-to-end test, not production.\n"
    files = render_rule_files(spec, window_scale=window_scale, min_window_s=min_window_s,
                              **stall)
    return {name: dump_yaml(doc, header) for name, doc in files.items()}


def alertmanager_text(teams_path: Path, webhook_base: str | None = None,
                      timing_scale: float = 1.0) -> str:
    config = render_alertmanager_config(load_teams(teams_path), webhook_base=webhook_base,
                                        timing_scale=timing_scale)
    header = ALERTMANAGER_HEADER
    if timing_scale != 1.0:
        header += f"# Timings scaled by {timing_scale:g} for an end-to-end test, not production.\n"
    return dump_yaml(config, header)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _cmd_rules(args: argparse.Namespace) -> int:
    out_dir: Path = args.out_dir
    if args.window_scale != 1.0 and out_dir.resolve() == DEFAULT_RULES_DIR.resolve():
        print("ett rules: --window-scale writes test rules; pass --out-dir elsewhere so the "
              "committed production rules stay as they are", file=sys.stderr)
        return 2
    try:
        texts = rule_texts(args.spec, None if args.no_teams_check else args.teams,
                           window_scale=args.window_scale,
                           min_window_s=parse_duration(args.min_window),
                           taxonomy_path=args.taxonomy)
    except (SpecError, TaxonomyError, ValueError) as exc:
        print(f"ett rules: {exc}", file=sys.stderr)
        return 1
    existing = {p.name for p in out_dir.glob(f"*{RULES_SUFFIX}")} if out_dir.is_dir() else set()
    if args.check:
        stale = sorted(n for n, t in texts.items()
                       if not (out_dir / n).is_file() or (out_dir / n).read_text() != t)
        extra = sorted(existing - set(texts))
        for name in stale:
            print(f"ett rules: {out_dir / name} differs from the spec; run `ett rules`",
                  file=sys.stderr)
        for name in extra:
            print(f"ett rules: {out_dir / name} has no SLO in the spec", file=sys.stderr)
        return 1 if stale or extra else 0
    for name, text in texts.items():
        _write(out_dir / name, text)
    # A file for an SLO removed from the spec would keep alerting: remove it.
    for name in sorted(existing - set(texts)):
        (out_dir / name).unlink()
        print(f"removed {out_dir / name} (SLO no longer in the spec)")
    print(f"wrote {len(texts)} rule files to {out_dir}")
    return 0


def _cmd_alertmanager(args: argparse.Namespace) -> int:
    try:
        text = alertmanager_text(args.teams, webhook_base=args.webhook_base,
                                 timing_scale=args.timing_scale)
    except SpecError as exc:
        print(f"ett alertmanager-config: {exc}", file=sys.stderr)
        return 1
    if args.check:
        same = args.out.is_file() and args.out.read_text(encoding="utf-8") == text
        if not same:
            print(f"ett alertmanager-config: {args.out} differs; run `ett alertmanager-config`",
                  file=sys.stderr)
        return 0 if same else 1
    _write(args.out, text)
    print(f"wrote {args.out}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    rules = subparsers.add_parser(
        "rules", help="render Prometheus recording and alerting rules from the SLO spec")
    rules.add_argument("--spec", type=Path, default=DEFAULT_SPEC)
    rules.add_argument("--teams", type=Path, default=DEFAULT_TEAMS,
                       help="every SLO team must have a receiver here")
    rules.add_argument("--no-teams-check", action="store_true",
                       help="skip the check against the teams file")
    rules.add_argument("--out-dir", type=Path, default=DEFAULT_RULES_DIR,
                       help="one <slo>.rules.yaml per SLO is written here")
    rules.add_argument("--window-scale", type=float, default=1.0,
                       help="multiply every alert window and the absent-data `for` by this "
                            "(e.g. 0.0167: 1h -> 1m) for end-to-end tests; thresholds stay")
    rules.add_argument("--min-window", default="1m",
                       help="floor for scaled windows (rate() needs several scrapes)")
    rules.add_argument("--taxonomy", type=Path, default=DEFAULT_TAXONOMY,
                       help="its stall_owner is the team EttJobStalled pages")
    rules.add_argument("--check", action="store_true",
                       help="write nothing; exit 1 when the files differ from the spec")
    rules.set_defaults(func=_cmd_rules)

    am = subparsers.add_parser(
        "alertmanager-config", help="render the Alertmanager config from the teams file")
    am.add_argument("--teams", type=Path, default=DEFAULT_TEAMS)
    am.add_argument("--out", type=Path, default=DEFAULT_ALERTMANAGER)
    am.add_argument("--webhook-base", default=None,
                    help="send every team to <URL>/<team> (overrides the teams file)")
    am.add_argument("--timing-scale", type=float, default=1.0,
                    help="multiply group_wait, group_interval and repeat_interval (tests)")
    am.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 when the file differs from the teams file")
    am.set_defaults(func=_cmd_alertmanager)
