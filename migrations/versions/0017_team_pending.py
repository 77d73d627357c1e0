"""team_pending: the team rollups' deltas a recompute of everything holds back, added in
one go when it ends (or by the next pass, if it stopped first)

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # No key: rows are only appended, then summed and emptied all at once.
    op.create_table(
        "team_pending",
        sa.Column("hour", sa.DateTime(timezone=True), nullable=False),
        *(sa.Column(label, sa.Text(), nullable=False)
          for label in ("team", "component", "phase", "owner")),
        sa.Column("settled", sa.Numeric(30, 0), nullable=False),
        sa.Column("unsettled", sa.Numeric(30, 0), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("team_pending")
