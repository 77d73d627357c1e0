"""An index of the settled jobs by the end of their last attempt, carrying the job id: a
prune lists the jobs it keeps as the candidates less the prunable ones, both read from
indexes alone (a probe of each candidate's full row took ~0.5 s at 180 days)

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_jobs_settled_last_at", "jobs", ["last_at"], unique=False,
                    postgresql_include=["job_id"], postgresql_where=sa.text("NOT open"))


def downgrade() -> None:
    op.drop_index("ix_jobs_settled_last_at", table_name="jobs")
