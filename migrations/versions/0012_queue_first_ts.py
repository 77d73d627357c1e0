"""queue rows carry their batch's earliest event instant

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: a row queued before (or by a path that does not know it) reads as "not
    # known", and the aggregator computes that job from all its events.
    op.add_column("dirty_jobs", sa.Column("first_ts", sa.DateTime(timezone=True)))


def downgrade() -> None:
    op.drop_column("dirty_jobs", "first_ts")
