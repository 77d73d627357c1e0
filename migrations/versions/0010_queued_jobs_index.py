"""jobs: a partial index on the jobs the scheduler reported queue time for

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# Queue time lives in the job documents (docs/model.md section 25): without this index a
# window's queue seconds unpacked every result document of the window's jobs (31,589 jobs,
# 330 ms on the 18-day fleet), though only scheduler-reported jobs have any.
_QUEUED = "(result ->> 'queue_seconds')::float8 > 0"


def upgrade() -> None:
    op.create_index("ix_jobs_queued_last_at", "jobs", ["last_at"], unique=False,
                    postgresql_where=sa.text(_QUEUED))


def downgrade() -> None:
    op.drop_index("ix_jobs_queued_last_at", table_name="jobs")
