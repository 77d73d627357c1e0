"""`ett tokens create|list|revoke`: the token store from the command line."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime

from service.access.auth import ROLES


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if value is not None else "never"


def _run(args: argparse.Namespace) -> int:
    from service.access import tokens
    from service.store import migrate
    from service.store.engine import open_database

    with open_database(args.settings, pool_size=1) as db:
        if not migrate.is_at_head(db.engine):
            print("database schema is not at head: run `ett migrate` first", file=sys.stderr)
            return 2
        with db.engine.begin() as conn:
            if args.tokens_command == "create":
                patterns = [p for arg in args.models for p in arg.split(",") if p.strip()]
                try:
                    info, secret = tokens.create_token(conn, args.role, args.team,
                                                       [p.strip() for p in patterns], args.note)
                except tokens.TokenError as exc:
                    print(f"ett tokens create: {exc}", file=sys.stderr)
                    return 2
                scope = [f"role {info.role}"]
                if info.team:
                    scope.append(f"team {info.team}")
                if info.model_patterns:
                    scope.append(f"models {','.join(info.model_patterns)}")
                print(f"created {info.token_id} ({', '.join(scope)})")
                print("the token is shown only this once; store it as a secret:")
                print(secret)
                return 0
            if args.tokens_command == "list":
                for info in tokens.list_tokens(conn, include_revoked=args.all):
                    fields = [
                        info.token_id, info.role, info.team or "-",
                        ",".join(info.model_patterns) or "-",
                        f"created={_when(info.created_at)}",
                        f"last_used={_when(info.last_used_at)}",
                    ]
                    if info.revoked_at is not None:
                        fields.append(f"revoked={_when(info.revoked_at)}")
                    print("\t".join(fields))
                return 0
            revoked = tokens.revoke_token(conn, args.token_id)
            if revoked is None:
                print(f"ett tokens revoke: no token {args.token_id!r}", file=sys.stderr)
                return 1
            print(f"revoked {revoked.token_id} at {_when(revoked.revoked_at)}; every replica"
                  f" refuses it within ETT_TOKEN_CACHE_TTL_S"
                  f" ({args.settings.token_cache_ttl_s:g} s)")
            return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("tokens", help="create, list and revoke API tokens")
    sub = p.add_subparsers(dest="tokens_command", required=True)
    create = sub.add_parser("create", help="create a token; its secret is printed once")
    create.add_argument("--role", required=True, choices=ROLES)
    create.add_argument("--models", action="append", default=[], metavar="PATTERNS",
                        help="writer: model name patterns, e.g. 'ads_*' (comma-separated or"
                             " repeated)")
    create.add_argument("--team", default=None,
                        help="the team this token writes for (team claims are checked)")
    create.add_argument("--note", default=None, help="free text: who or what uses it")
    listing = sub.add_parser("list", help="one token a line: id, role, team, models, created,"
                                          " last used")
    listing.add_argument("--all", action="store_true", help="include revoked tokens")
    revoke = sub.add_parser("revoke", help="revoke a token by id (effective within seconds)")
    revoke.add_argument("token_id", metavar="ID")
    p.set_defaults(func=_run)
