"""job_impact (per-job Level-1 GPU time by term and component, labels) and annotations

Revision ID: 0005
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# Spelled out, not imported: a migration is a snapshot of the schema it creates.
_TERMS = ("tts", "ttr", "in_loop_overhead", "final_shutdown")
_COMPONENTS = ("scheduling", "initialization", "compilation", "effective_training",
               "wasted_training", "shutdown", "unattributed")


def upgrade() -> None:
    op.create_table(
        "job_impact",
        sa.Column("job_id", sa.Text(), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("team", sa.Text(), nullable=False),
        sa.Column("first_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("running", sa.Boolean(), nullable=False),
        sa.Column("labels", JSONB(), server_default=sa.text("'{}'::jsonb"), nullable=False),
        sa.Column("held_gpu_us", sa.BigInteger(), nullable=False),
        sa.Column("effective_gpu_us", sa.BigInteger(), nullable=False),
        sa.Column("nof", sa.Integer(), nullable=False),
        sa.Column("tts_us", sa.BigInteger(), nullable=False),
        sa.Column("ttr_us", sa.BigInteger(), nullable=False),
        *(sa.Column(f"{t}_{c}_gpu_us", sa.BigInteger(), nullable=False)
          for t in _TERMS for c in _COMPONENTS),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_job_impact")),
    )
    op.create_index("ix_job_impact_first_at", "job_impact", ["first_at"], unique=False)
    op.create_table(
        "annotations",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("ts", sa.DateTime(timezone=True), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("text", sa.Text(), nullable=True),
        sa.Column("team", sa.Text(), nullable=True),
        sa.Column("models", ARRAY(sa.Text()), server_default=sa.text("'{}'"), nullable=False),
        sa.Column("tags", ARRAY(sa.Text()), server_default=sa.text("'{}'"), nullable=False),
        sa.Column("created_by", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"),
                  nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_annotations")),
    )
    op.create_index("ix_annotations_ts", "annotations", ["ts"], unique=False)
    # Jobs computed before this revision get their rows at their next recompute
    # (`ett aggregate --recompute-all` fills them at once; docs/impact.md).


def downgrade() -> None:
    op.drop_index("ix_annotations_ts", table_name="annotations")
    op.drop_table("annotations")
    op.drop_index("ix_job_impact_first_at", table_name="job_impact")
    op.drop_table("job_impact")
