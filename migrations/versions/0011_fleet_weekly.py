"""fleet_weekly: the fleet rollup by UTC week (from Monday), for long windows

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fleet_weekly",
        sa.Column("week", sa.DateTime(timezone=True), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("team", sa.Text(), nullable=False),
        sa.Column("component", sa.Text(), nullable=False),
        sa.Column("phase", sa.Text(), nullable=False),
        sa.Column("owner", sa.Text(), nullable=False),
        sa.Column("settled_gpu_us", sa.Numeric(30, 0), nullable=False),
        sa.Column("unsettled_gpu_us", sa.Numeric(30, 0), nullable=False),
        sa.PrimaryKeyConstraint(
            "week", "model", "team", "component", "phase", "owner",
            name=op.f("pk_fleet_weekly")
        ),
    )
    # Existing history: the weekly rows are exactly the daily rows summed by UTC week.
    op.execute(
        """
        INSERT INTO fleet_weekly
        SELECT date_trunc('week', day, 'UTC'), model, team, component, phase, owner,
               sum(settled_gpu_us), sum(unsettled_gpu_us)
        FROM fleet_daily GROUP BY 1, 2, 3, 4, 5, 6
        """
    )


def downgrade() -> None:
    op.drop_table("fleet_weekly")
