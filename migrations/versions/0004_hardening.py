"""hardening: quarantined jobs, and each job's owner fixed by its first stored event

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "aggregation_quarantine",
        sa.Column("job_id", sa.Text(), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        # The highest dirty_jobs seq consumed when the job failed: a later seq means new events.
        sa.Column("last_seq", sa.BigInteger(), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("failed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_aggregation_quarantine")),
    )
    op.create_table(
        "job_owners",
        sa.Column("job_id", sa.Text(), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("team", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_job_owners")),
    )
    # All-time totals grow without bound: a million GPUs for 400 days is 3.5e19
    # GPU-microseconds, past a bigint's 9.2e18. NUMERIC(30) holds ten thousand times that.
    op.alter_column("settled_totals", "settled_gpu_us", type_=sa.Numeric(30, 0),
                    existing_type=sa.BigInteger(), existing_nullable=False)
    # Existing jobs: the owner is the first stored event's model, and the first team any
    # of its events named (what the aggregator already reported).
    op.execute(
        """
        INSERT INTO job_owners (job_id, model, team)
        SELECT DISTINCT ON (job_id) job_id, model,
               (SELECT t.team FROM events t WHERE t.job_id = e.job_id AND t.team IS NOT NULL
                ORDER BY t.received_at, t.ts LIMIT 1)
        FROM events e ORDER BY job_id, received_at, ts
        """
    )


def downgrade() -> None:
    op.alter_column("settled_totals", "settled_gpu_us", type_=sa.BigInteger(),
                    existing_type=sa.Numeric(30, 0), existing_nullable=False)
    op.drop_table("job_owners")
    op.drop_table("aggregation_quarantine")
