"""a job's result document stays inline, uncompressed, up to a page

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Every pass rewrites every running job's row, whose `result` (~3 KB for one attempt)
    # was compressed by pglz on the way in: half of the server's work for the row
    # (docs/performance.md, "aggregate_by_age"). Rows up to a page now stay as they are;
    # larger ones (many attempts) are still compressed and moved out of line. Only rows
    # written from now on are affected: no table rewrite.
    op.execute("ALTER TABLE jobs SET (toast_tuple_target = 8160)")


def downgrade() -> None:
    op.execute("ALTER TABLE jobs RESET (toast_tuple_target)")
