"""events partitioned by month on ts; one index fewer

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_COLUMNS = ("event_id, ts, job_id, attempt, model, type, phase, gpus, team, rank, attrs,"
            " extra, received_at")


def _columns() -> list[sa.Column]:
    return [
        sa.Column("event_id", sa.Uuid(as_uuid=False), nullable=False),
        sa.Column("ts", sa.DateTime(timezone=True), nullable=False),
        sa.Column("job_id", sa.Text(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("phase", sa.Text(), nullable=True),
        sa.Column("gpus", sa.Integer(), nullable=True),
        sa.Column("team", sa.Text(), nullable=True),
        sa.Column("rank", sa.Integer(), nullable=True),
        sa.Column("attrs", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("extra", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("received_at", sa.DateTime(timezone=True), server_default=sa.text("now()"),
                  nullable=False),
    ]


def _month(ts: datetime) -> datetime:
    ts = ts.astimezone(UTC)
    return datetime(ts.year, ts.month, 1, tzinfo=UTC)


def _next(month: datetime) -> datetime:
    return datetime(month.year + month.month // 12, month.month % 12 + 1, 1, tzinfo=UTC)


def upgrade() -> None:
    # Converted in place: the old table is renamed, the partitioned one created beside it
    # with a partition for every month its rows span (up to this one; `ett migrate` adds
    # the months ahead right after), the rows copied, the old table dropped. The key is
    # built after the copy (one sort per partition rather than one insert per row).
    op.execute("ALTER TABLE events RENAME TO events_0008")
    op.execute("ALTER TABLE events_0008 RENAME CONSTRAINT pk_events TO pk_events_0008")
    op.drop_index("ix_events_job_id_ts", table_name="events_0008")
    op.drop_index("ix_events_received_at", table_name="events_0008")
    op.create_table("events", *_columns(), postgresql_partition_by="RANGE (ts)")
    first = op.get_bind().execute(sa.text("SELECT min(ts) FROM events_0008")).scalar()
    now = datetime.now(UTC)
    month, last = _month(min(first or now, now)), _month(now)
    while month <= last:
        op.execute(f"CREATE TABLE events_p{month:%Y%m} PARTITION OF events FOR VALUES FROM"
                   f" ('{month.isoformat()}') TO ('{_next(month).isoformat()}')")
        month = _next(month)
    op.execute("CREATE TABLE events_default PARTITION OF events DEFAULT")
    op.execute(f"INSERT INTO events ({_COLUMNS}) SELECT {_COLUMNS} FROM events_0008")
    op.drop_table("events_0008")
    # (job_id, ts, event_id): the same key as before in another column order, so that it
    # also serves every by-job read in time order, which ix_events_job_id_ts served; the
    # BRIN index on received_at served no read at all (docs/operations.md, "Disk").
    op.create_primary_key("pk_events", "events", ["job_id", "ts", "event_id"])
    op.execute("ANALYZE events")


def downgrade() -> None:
    op.create_table("events_0009", *_columns())
    op.execute(f"INSERT INTO events_0009 ({_COLUMNS}) SELECT {_COLUMNS} FROM events")
    op.drop_table("events")  # and its partitions
    op.rename_table("events_0009", "events")
    op.create_primary_key("pk_events", "events", ["job_id", "event_id", "ts"])
    op.create_index("ix_events_job_id_ts", "events", ["job_id", "ts"], unique=False)
    op.create_index("ix_events_received_at", "events", ["received_at"], unique=False,
                    postgresql_using="brin")
