"""job-scoped event ids, and fleet rollup sums that cannot overflow

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_FLEET = ("fleet_hourly", "fleet_daily")
_SUMS = ("settled_gpu_us", "unsettled_gpu_us")


def upgrade() -> None:
    # An event id is unique within its job only; the instant is part of the key so that a
    # table partitioned by time later can keep it (a partitioned table's unique key must hold
    # the partition column). Rows unique by id alone are unique by this key too: the data
    # is converted in place by swapping the constraint.
    op.drop_constraint("pk_events", "events", type_="primary")
    op.create_primary_key("pk_events", "events", ["job_id", "event_id", "ts"])
    # One model-day of the fleet sums as many jobs as the model runs: 120 jobs of 2^20 GPUs
    # for a day is 1.1e19 GPU-microseconds, past a bigint's 9.2e18.
    for table in _FLEET:
        for column in _SUMS:
            op.alter_column(table, column, type_=sa.Numeric(30, 0),
                            existing_type=sa.BigInteger(), existing_nullable=False)


def downgrade() -> None:
    for table in _FLEET:
        for column in _SUMS:
            op.alter_column(table, column, type_=sa.BigInteger(),
                            existing_type=sa.Numeric(30, 0), existing_nullable=False)
    # Ids repeated across jobs cannot all stay under a global key: the later copies go.
    op.execute("""
        DELETE FROM events e USING events f
        WHERE e.event_id = f.event_id AND (e.received_at, e.job_id, e.ts)
              > (f.received_at, f.job_id, f.ts)
    """)
    op.drop_constraint("pk_events", "events", type_="primary")
    op.create_primary_key("pk_events", "events", ["event_id"])
