"""job_first_ts, a lower bound of each job's earliest event instant (retention); the team
and model window rollups; statistics on the jobs' queue seconds

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

# As of this revision (the schema of a migration never follows the code's constants).
_COMPONENTS = ("scheduling", "initialization", "compilation", "effective_training",
               "wasted_training", "shutdown", "unattributed")
_TEAM_LABELS = ("team", "component", "phase", "owner")
_FIGURES = (*(f"{c}_gpu_us" for c in _COMPONENTS), "at_risk_gpu_us", "unreported_gpu_us")
_BUCKETS = {"hourly": "hour", "daily": "day", "weekly": "week"}
_QUEUED_STATISTICS = "st_jobs_queue_seconds"


def _sum(column: str) -> sa.Column:
    return sa.Column(column, sa.Numeric(30, 0), nullable=False)


def upgrade() -> None:
    op.create_table(
        "job_first_ts",
        sa.Column("job_id", sa.Text(), nullable=False),
        sa.Column("first_ts", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_job_first_ts")),
    )
    # Existing history: every stored event counts, whether its job was aggregated or not
    # (one pass over the events, in a maintenance window on a large database, like 0009).
    op.execute("INSERT INTO job_first_ts SELECT job_id, min(ts) FROM events GROUP BY job_id")
    op.create_index("ix_job_first_ts_first_ts", "job_first_ts", ["first_ts"], unique=False)

    for level in ("hourly", "daily"):
        bucket = _BUCKETS[level]
        op.create_table(
            f"team_{level}",
            sa.Column(bucket, sa.DateTime(timezone=True), nullable=False),
            *(sa.Column(label, sa.Text(), nullable=False) for label in _TEAM_LABELS),
            _sum("settled_gpu_us"), _sum("unsettled_gpu_us"),
            sa.PrimaryKeyConstraint(bucket, *_TEAM_LABELS, name=op.f(f"pk_team_{level}")),
        )
        # Existing history: the fleet rows summed over models (a row for every label set
        # some model has there, as the aggregator's deltas keep it).
        labels = ", ".join(_TEAM_LABELS)
        op.execute(f"INSERT INTO team_{level} SELECT {bucket}, {labels}, sum(settled_gpu_us),"
                   f" sum(unsettled_gpu_us) FROM fleet_{level} GROUP BY {bucket}, {labels}")
    held = "settled_gpu_us + unsettled_gpu_us"
    figures = [*(f"coalesce(sum({held}) FILTER (WHERE component = '{c}'), 0)"
                 for c in _COMPONENTS),
               "coalesce(sum(unsettled_gpu_us) FILTER"
               " (WHERE component = 'effective_training'), 0)",
               f"coalesce(sum({held}) FILTER (WHERE phase = 'unreported'), 0)"]
    for level, bucket in _BUCKETS.items():
        op.create_table(
            f"model_{level}",
            sa.Column(bucket, sa.DateTime(timezone=True), nullable=False),
            sa.Column("model", sa.Text(), nullable=False),
            sa.Column("team", sa.Text(), nullable=False),
            *(_sum(figure) for figure in _FIGURES),
            sa.PrimaryKeyConstraint(bucket, "model", "team", name=op.f(f"pk_model_{level}")),
        )
        op.execute(f"INSERT INTO model_{level} SELECT {bucket}, model, team, {', '.join(figures)}"
                   f" FROM fleet_{level} GROUP BY {bucket}, model, team")


    # A window's queue seconds read the jobs the scheduler reported queue time for, on
    # their partial index (0010); without statistics on the expression the planner takes a
    # third of a team's jobs for them and unpacks each one's result document instead (28
    # ms for none at 36 days: docs/performance.md, round 3).
    op.execute(f"CREATE STATISTICS {_QUEUED_STATISTICS} ON"
               " (((result ->> 'queue_seconds')::float8)) FROM jobs")
    op.execute("ANALYZE jobs")


def downgrade() -> None:
    op.execute(f"DROP STATISTICS IF EXISTS {_QUEUED_STATISTICS}")
    for level in ("hourly", "daily", "weekly"):
        op.drop_table(f"model_{level}")
    for level in ("hourly", "daily"):
        op.drop_table(f"team_{level}")
    op.drop_index("ix_job_first_ts_first_ts", table_name="job_first_ts")
    op.drop_table("job_first_ts")
