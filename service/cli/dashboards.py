"""`ett dashboards`: write the Grafana dashboards' JSON and the generated k8s manifests.

Both are generated from code and committed; tests fail when the committed files differ
from what this command would write.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .failures import UsageProblem

DEFAULT_OUT = Path("dashboards/json")
# The Kubernetes manifests are generated next to the committed deploy/ files of a checkout.
REPO = Path(__file__).resolve().parents[2]


def _handler(args: argparse.Namespace) -> int:
    try:
        from dashboards import k8s
        from dashboards.render import render_all
    except ModuleNotFoundError as exc:  # the SDK is an optional dependency
        raise UsageProblem(
            f"needs the Grafana SDK, which `make run` does not install ({exc}); add it with"
            " `.venv/bin/pip install -e '.[dashboards]'` (`make test` installs it too)") from None
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    for name, text in render_all().items():
        (out / name).write_text(text, encoding="utf-8")
        print(f"wrote {out / name}")
    if args.k8s:
        for path, text in k8s.render_all(REPO).items():
            target = REPO / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "dashboards",
        help="write the Grafana dashboards (JSON) and the generated Kubernetes manifests",
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT,
                   help=f"directory for the dashboard JSON (default {DEFAULT_OUT})")
    p.add_argument("--no-k8s", dest="k8s", action="store_false",
                   help="skip deploy/k8s/base/ (PrometheusRule and ConfigMaps)")
    p.set_defaults(func=_handler)
