"""Alembic environment: the connection comes from the caller (ett migrate) or ETT_DATABASE_URL."""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import create_engine

from service.store.engine import normalize_url
from service.store.retention import DEFAULT_PARTITION, partition_month
from service.store.tables import metadata

config = context.config
target_metadata = metadata


def _include_object(obj, name, type_, reflected, compare_to):  # type: ignore[no-untyped-def]
    # The events partitions (created ahead at run time) are not drift.
    return not (type_ == "table" and reflected and compare_to is None
                and (name == DEFAULT_PARTITION or partition_month(name) is not None))


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            include_object=_include_object,
            compare_type=True,
        )
        with context.begin_transaction():
            context.run_migrations()
        return
    url = config.attributes.get("url") or os.environ.get("ETT_DATABASE_URL")
    if not url:
        raise SystemExit("set ETT_DATABASE_URL (or use `ett migrate`, which knows the embedded DB)")
    engine = create_engine(normalize_url(url))
    with engine.connect() as conn:
        context.configure(
            connection=conn,
            target_metadata=target_metadata,
            include_object=_include_object,
            compare_type=True,
        )
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; run against a database")
run_migrations_online()
