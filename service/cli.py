"""The `ett` command line: serve, migrate, aggregate, demo and the renderers."""

from __future__ import annotations

import argparse
import logging
import sys
import warnings
from collections.abc import Sequence

from .settings import Settings

log = logging.getLogger("ett")


def _cmd_serve(args: argparse.Namespace) -> int:
    from .server import serve

    return serve(args.settings, host=args.host, port=args.port, aggregator=not args.no_aggregator,
                 demo=args.demo)


def _cmd_migrate(args: argparse.Namespace) -> int:
    from . import migrate
    from .runtime import open_database

    with open_database(args.settings, pool_size=1) as db:
        if args.revision and args.downgrade:
            migrate.downgrade(db.engine, args.revision)
        else:
            migrate.upgrade(db.engine, args.revision or "head")
        with db.engine.connect() as conn:
            print(f"database: {db.describe()}")
            print(f"schema at revision {migrate.current_revision(conn)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ett", description="ETT telemetry")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the API, the aggregator loop and /metrics")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--no-aggregator", action="store_true",
                       help="API-only replica: no aggregation loop, only request metrics")
    serve.add_argument("--demo", action="store_true",
                       help="post a simulated demo fleet through the API after start-up")
    serve.set_defaults(func=_cmd_serve)

    mig = sub.add_parser("migrate", help="apply database migrations")
    mig.add_argument("revision", nargs="?", default=None, help="target revision (default head)")
    mig.add_argument("--downgrade", action="store_true", help="downgrade to REVISION")
    mig.set_defaults(func=_cmd_migrate)

    for module in _plugins():
        module.register(sub)
    return parser


def _plugins() -> list:  # type: ignore[type-arg]
    from . import cli_more

    return cli_more.modules()


def main(argv: Sequence[str] | None = None) -> int:
    # pgserver's platformdirs warns about a missing XDG_RUNTIME_DIR on every start (servers
    # and containers rarely have one); it falls back to /tmp, which is fine.
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
    parser = build_parser()
    args = parser.parse_args(argv)
    settings = Settings()
    from .runtime import configure_logging

    configure_logging(settings.log_level)
    args.settings = settings
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
