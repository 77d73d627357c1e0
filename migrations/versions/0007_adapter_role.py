"""api tokens: the `adapter` role (a scheduler adapter posts the scheduler's events)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_constraint("ck_api_tokens_role", "api_tokens", type_="check")
    op.create_check_constraint(
        "ck_api_tokens_role", "api_tokens", "role IN ('admin', 'writer', 'reader', 'adapter')")


def downgrade() -> None:
    op.execute("DELETE FROM api_tokens WHERE role = 'adapter'")
    op.drop_constraint("ck_api_tokens_role", "api_tokens", type_="check")
    op.create_check_constraint(
        "ck_api_tokens_role", "api_tokens", "role IN ('admin', 'writer', 'reader')")
