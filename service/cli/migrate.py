"""`ett migrate`: apply (or roll back) the Alembic migrations."""

from __future__ import annotations

import argparse


def _run(args: argparse.Namespace) -> int:
    from service.store import migrate
    from service.store.engine import open_database

    with open_database(args.settings, pool_size=1) as db:
        if args.revision and args.downgrade:
            migrate.downgrade(db.engine, args.revision)
        else:
            migrate.upgrade(db.engine, args.revision or "head")
        with db.engine.connect() as conn:
            print(f"database: {db.describe()}")
            print(f"schema at revision {migrate.current_revision(conn)}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("migrate", help="apply database migrations")
    p.add_argument("revision", nargs="?", default=None, help="target revision (default head)")
    p.add_argument("--downgrade", action="store_true", help="downgrade to REVISION")
    p.set_defaults(func=_run)
