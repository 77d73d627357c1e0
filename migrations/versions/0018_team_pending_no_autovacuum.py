"""team_pending: no autovacuum (rows are appended, summed once and the table emptied; its
vacuums and analyses only competed with the recompute that fills it)

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05
"""

from __future__ import annotations

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Vacuums against transaction-id wraparound still run: they ignore this setting.
    op.execute("ALTER TABLE team_pending SET (autovacuum_enabled = false)")


def downgrade() -> None:
    op.execute("ALTER TABLE team_pending RESET (autovacuum_enabled)")
