"""fleet_daily: the fleet rollup by UTC day, for long windows

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fleet_daily",
        sa.Column("day", sa.DateTime(timezone=True), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("team", sa.Text(), nullable=False),
        sa.Column("component", sa.Text(), nullable=False),
        sa.Column("phase", sa.Text(), nullable=False),
        sa.Column("owner", sa.Text(), nullable=False),
        sa.Column("settled_gpu_us", sa.BigInteger(), nullable=False),
        sa.Column("unsettled_gpu_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "day", "model", "team", "component", "phase", "owner", name=op.f("pk_fleet_daily")
        ),
    )
    op.create_index("ix_fleet_daily_model_day", "fleet_daily", ["model", "day"], unique=False)
    # Existing history: the daily rows are exactly the hourly rows summed by UTC day.
    op.execute(
        """
        INSERT INTO fleet_daily
        SELECT date_trunc('day', hour, 'UTC'), model, team, component, phase, owner,
               sum(settled_gpu_us), sum(unsettled_gpu_us)
        FROM fleet_hourly GROUP BY 1, 2, 3, 4, 5, 6
        """
    )


def downgrade() -> None:
    op.drop_index("ix_fleet_daily_model_day", table_name="fleet_daily")
    op.drop_table("fleet_daily")
