"""An index of the jobs' (team, model) pairs: the models of a team (the console's team
page, `/v1/models`) are read by stepping from pair to pair on it, not by reading every job
of the team (at 180 days, ~31,000 full-page rows for one team)

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04
"""

from __future__ import annotations

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_jobs_team_model", "jobs", ["team", "model"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_jobs_team_model", table_name="jobs")
