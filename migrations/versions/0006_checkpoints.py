"""checkpoint_attempts: per-attempt checkpoint facts for checkpoint advice

Revision ID: 0006
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Filled by the aggregator as it recomputes jobs; after this upgrade,
    # `ett aggregate --recompute-all` fills it for the history kept.
    op.create_table(
        "checkpoint_attempts",
        sa.Column("job_id", sa.Text(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("team", sa.Text(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("held_us", sa.BigInteger(), nullable=False),
        sa.Column("interrupted", sa.Boolean(), nullable=False),
        sa.Column("blocking_save_us", sa.BigInteger(), nullable=False),
        sa.Column("durable_checkpoints", sa.Integer(), nullable=False),
        sa.Column("intervals_us", postgresql.ARRAY(sa.BigInteger()), nullable=False),
        sa.Column("lost_progress_us", sa.BigInteger(), nullable=False),
        sa.Column("ttr_us", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("job_id", "attempt", name=op.f("pk_checkpoint_attempts")),
    )
    op.create_index("ix_checkpoint_attempts_model_started_at", "checkpoint_attempts",
                    ["model", "started_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_checkpoint_attempts_model_started_at", table_name="checkpoint_attempts")
    op.drop_table("checkpoint_attempts")
