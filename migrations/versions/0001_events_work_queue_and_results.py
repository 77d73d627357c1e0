"""events, work queue and results

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "aggregator_state",
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("value", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_aggregator_state")),
    )
    op.create_table(
        "attempts",
        sa.Column("job_id", sa.Text(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("allocated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("released_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("end_cause", sa.Text(), nullable=False),
        sa.Column("held_seconds", sa.Double(), nullable=False),
        sa.Column("startup_seconds", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("job_id", "attempt", name=op.f("pk_attempts")),
    )
    op.create_table(
        "dirty_jobs",
        sa.Column("seq", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.Text(), nullable=False),
        sa.Column(
            "marked_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_dirty_jobs")),
    )
    op.create_index("ix_dirty_jobs_job_id", "dirty_jobs", ["job_id"], unique=False)
    op.create_table(
        "events",
        sa.Column("event_id", sa.Uuid(as_uuid=False), nullable=False),
        sa.Column("ts", sa.DateTime(timezone=True), nullable=False),
        sa.Column("job_id", sa.Text(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("phase", sa.Text(), nullable=True),
        sa.Column("gpus", sa.Integer(), nullable=True),
        sa.Column("team", sa.Text(), nullable=True),
        sa.Column("rank", sa.Integer(), nullable=True),
        sa.Column("attrs", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("extra", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column(
            "received_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("event_id", name=op.f("pk_events")),
    )
    op.create_index("ix_events_job_id_ts", "events", ["job_id", "ts"], unique=False)
    op.create_index(
        "ix_events_received_at", "events", ["received_at"], unique=False, postgresql_using="brin"
    )
    op.create_table(
        "fleet_hourly",
        sa.Column("hour", sa.DateTime(timezone=True), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("team", sa.Text(), nullable=False),
        sa.Column("component", sa.Text(), nullable=False),
        sa.Column("phase", sa.Text(), nullable=False),
        sa.Column("owner", sa.Text(), nullable=False),
        sa.Column("settled_gpu_us", sa.BigInteger(), nullable=False),
        sa.Column("unsettled_gpu_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "hour", "model", "team", "component", "phase", "owner", name=op.f("pk_fleet_hourly")
        ),
    )
    op.create_index("ix_fleet_hourly_model_hour", "fleet_hourly", ["model", "hour"], unique=False)
    op.create_table(
        "jobs",
        sa.Column("job_id", sa.Text(), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("team", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("first_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("open", sa.Boolean(), nullable=False),
        sa.Column("held_gpu_seconds", sa.Double(), nullable=False),
        sa.Column("effective_gpu_seconds", sa.Double(), nullable=False),
        sa.Column("at_risk_gpu_seconds", sa.Double(), nullable=False),
        sa.Column("nof", sa.Integer(), nullable=False),
        sa.Column("tts_seconds", sa.Double(), nullable=True),
        sa.Column("ttr_seconds", postgresql.ARRAY(sa.Double()), nullable=False),
        sa.Column("ttr_causes", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("unknown_phase_events", sa.Integer(), nullable=False),
        sa.Column("result", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("computed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_jobs")),
    )
    op.create_index("ix_jobs_model_last_at", "jobs", ["model", "last_at"], unique=False)
    op.create_index(
        "ix_jobs_open", "jobs", ["open"], unique=False, postgresql_where=sa.text("open")
    )
    op.create_index("ix_jobs_team_last_at", "jobs", ["team", "last_at"], unique=False)
    op.create_table(
        "rollup_hourly",
        sa.Column("job_id", sa.Text(), nullable=False),
        sa.Column("hour", sa.DateTime(timezone=True), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("team", sa.Text(), nullable=False),
        sa.Column("component", sa.Text(), nullable=False),
        sa.Column("phase", sa.Text(), nullable=False),
        sa.Column("owner", sa.Text(), nullable=False),
        sa.Column("settled_gpu_us", sa.BigInteger(), nullable=False),
        sa.Column("unsettled_gpu_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "job_id", "hour", "component", "phase", "owner", name=op.f("pk_rollup_hourly")
        ),
    )
    op.create_table(
        "segments",
        sa.Column("job_id", sa.Text(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("hour", sa.DateTime(timezone=True), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("start_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("end_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("team", sa.Text(), nullable=False),
        sa.Column("component", sa.Text(), nullable=False),
        sa.Column("phase", sa.Text(), nullable=False),
        sa.Column("owner", sa.Text(), nullable=False),
        sa.Column("settled", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("job_id", "seq", name=op.f("pk_segments")),
    )
    op.create_index("ix_segments_hour_model", "segments", ["hour", "model"], unique=False)
    op.create_table(
        "settled_totals",
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("team", sa.Text(), nullable=False),
        sa.Column("component", sa.Text(), nullable=False),
        sa.Column("owner", sa.Text(), nullable=False),
        sa.Column("settled_gpu_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "model", "team", "component", "owner", name=op.f("pk_settled_totals")
        ),
    )


def downgrade() -> None:
    op.drop_table("settled_totals")
    op.drop_index("ix_segments_hour_model", table_name="segments")
    op.drop_table("segments")
    op.drop_table("rollup_hourly")
    op.drop_index("ix_jobs_team_last_at", table_name="jobs")
    op.drop_index("ix_jobs_open", table_name="jobs", postgresql_where=sa.text("open"))
    op.drop_index("ix_jobs_model_last_at", table_name="jobs")
    op.drop_table("jobs")
    op.drop_index("ix_fleet_hourly_model_hour", table_name="fleet_hourly")
    op.drop_table("fleet_hourly")
    op.drop_index("ix_events_received_at", table_name="events", postgresql_using="brin")
    op.drop_index("ix_events_job_id_ts", table_name="events")
    op.drop_table("events")
    op.drop_index("ix_dirty_jobs_job_id", table_name="dirty_jobs")
    op.drop_table("dirty_jobs")
    op.drop_table("attempts")
    op.drop_table("aggregator_state")
