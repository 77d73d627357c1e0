"""The schema as SQLAlchemy Core tables.

Alembic migrations are the only thing that creates it; this metadata exists so queries are
typed and so `alembic check` can prove the migrations and the code agree.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Double,
    Index,
    Integer,
    MetaData,
    Numeric,
    PrimaryKeyConstraint,
    Table,
    Text,
    Uuid,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

from ett_core.taxonomy import COMPONENTS

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "pk": "pk_%(table_name)s",
    }
)

TS = DateTime(timezone=True)

events = Table(
    "events",
    metadata,
    # Unique within a job (and instant), not globally: see migration 0008.
    Column("event_id", Uuid(as_uuid=False), nullable=False),
    Column("ts", TS, nullable=False),
    Column("job_id", Text, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("model", Text, nullable=False),
    Column("type", Text, nullable=False),
    Column("phase", Text),
    Column("gpus", Integer),
    Column("team", Text),
    Column("rank", Integer),
    Column("attrs", JSONB),
    # Unknown top-level fields, kept verbatim so a newer client loses nothing.
    Column("extra", JSONB),
    Column("received_at", TS, nullable=False, server_default=text("now()")),
    # Job first (every read is by job, in time order; the distribution column if the
    # table is ever sharded, docs/scale-out.md), the partition column in the key.
    PrimaryKeyConstraint("job_id", "ts", "event_id"),
    # By month on ts (store/retention.py): retention drops whole months.
    postgresql_partition_by="RANGE (ts)",
)

# A work queue rather than a received_at watermark: a watermark misses rows whose
# transaction committed after the watermark moved past their received_at.
dirty_jobs = Table(
    "dirty_jobs",
    metadata,
    Column("seq", BigInteger, primary_key=True, autoincrement=True),
    Column("job_id", Text, nullable=False),
    Column("marked_at", TS, nullable=False, server_default=text("now()")),
    # The batch's earliest event instant for the job, rounded down to the second; NULL when
    # not known (the aggregator then computes the job from all its events).
    Column("first_ts", TS),
    Index("ix_dirty_jobs_job_id", "job_id"),
)

jobs = Table(
    "jobs",
    metadata,
    Column("job_id", Text, primary_key=True),
    Column("model", Text, nullable=False),
    Column("team", Text, nullable=False),
    Column("state", Text, nullable=False),
    Column("first_at", TS, nullable=False),
    Column("last_at", TS, nullable=False),
    Column("open", Boolean, nullable=False),
    Column("held_gpu_seconds", Double, nullable=False),
    Column("effective_gpu_seconds", Double, nullable=False),
    Column("at_risk_gpu_seconds", Double, nullable=False),
    Column("nof", Integer, nullable=False),
    # Level-1 figures the metrics exporter turns into histograms and failure counters.
    Column("tts_seconds", Double),  # null until attempt 0 trains or ends
    Column("ttr_seconds", ARRAY(Double), nullable=False),
    Column("ttr_causes", ARRAY(Text), nullable=False),
    Column("unknown_phase_events", Integer, nullable=False),
    Column("result", JSONB, nullable=False),
    Column("computed_at", TS, nullable=False),
    Index("ix_jobs_model_last_at", "model", "last_at"),
    Index("ix_jobs_team_last_at", "team", "last_at"),
    # The (team, model) pairs, stepped through one index probe each (migration 0015).
    Index("ix_jobs_team_model", "team", "model"),
    Index("ix_jobs_open", "open", postgresql_where=text("open")),
    # What a prune drops, read from the index alone (job_id carried): the settled jobs
    # by the end of their last attempt (migration 0016).
    Index("ix_jobs_settled_last_at", "last_at", postgresql_include=["job_id"],
          postgresql_where=text("NOT open")),
    # The jobs with queue time (scheduler-reported attempts): what a window's queue reads
    # (with statistics on the expression, st_jobs_queue_seconds, migration 0014, so that
    # the planner knows how few they are).
    Index("ix_jobs_queued_last_at", "last_at",
          postgresql_where=text("(result ->> 'queue_seconds')::float8 > 0")),
    # Running jobs' rows are rewritten every pass: their result stays inline, uncompressed
    # (migration 0013).
    postgresql_with={"toast_tuple_target": 8160},
)

attempts = Table(
    "attempts",
    metadata,
    Column("job_id", Text, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("allocated_at", TS, nullable=False),
    Column("released_at", TS),
    Column("gpus", Integer, nullable=False),
    Column("end_cause", Text, nullable=False),
    Column("held_seconds", Double, nullable=False),
    Column("startup_seconds", Double, nullable=False),
    PrimaryKeyConstraint("job_id", "attempt"),
)

# The core's segments, clipped at hour boundaries so that a window edge reads one hour
# of one index instead of every segment that ends after it.
segments = Table(
    "segments",
    metadata,
    Column("job_id", Text, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("hour", TS, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("start_at", TS, nullable=False),
    Column("end_at", TS, nullable=False),
    Column("gpus", Integer, nullable=False),
    Column("model", Text, nullable=False),
    Column("team", Text, nullable=False),
    Column("component", Text, nullable=False),
    Column("phase", Text, nullable=False),
    Column("owner", Text, nullable=False),
    Column("settled", Boolean, nullable=False),
    PrimaryKeyConstraint("job_id", "seq"),
    Index("ix_segments_hour_model", "hour", "model"),
)

def _rollup_columns(sums: BigInteger | Numeric | None = None) -> list[Column]:
    """The labels and GPU-microsecond sums every rollup table carries (fresh objects each
    call: a Column belongs to one table). A job's own rows fit a bigint (its GPUs are
    bounded); the fleet's sum over jobs does not, so those are NUMERIC (migration 0008)."""
    return [
        *(Column(name, Text, nullable=False)
          for name in ("model", "team", "component", "phase", "owner")),
        Column("settled_gpu_us", sums or BigInteger(), nullable=False),
        Column("unsettled_gpu_us", sums or BigInteger(), nullable=False),
    ]


# GPU-microseconds (integers: sums stay exact however often they are revised).
# Per job, so that replacing a job's results knows exactly what it contributed before.
rollup_hourly = Table(
    "rollup_hourly",
    metadata,
    Column("job_id", Text, nullable=False),
    Column("hour", TS, nullable=False),
    *_rollup_columns(),
    PrimaryKeyConstraint("job_id", "hour", "component", "phase", "owner"),
)

# The same figures summed over jobs, maintained by deltas as jobs are replaced: what
# fleet, model and team windows read, so a 28-day query does not touch every job.
fleet_hourly = Table(
    "fleet_hourly",
    metadata,
    Column("hour", TS, nullable=False),
    *_rollup_columns(Numeric(30, 0)),
    PrimaryKeyConstraint("hour", "model", "team", "component", "phase", "owner"),
    Index("ix_fleet_hourly_model_hour", "model", "hour"),
)

# The fleet rollup again by UTC day: a 28-day window reads whole days here and only its
# ragged ends from fleet_hourly and segments (24x fewer rows than hours alone).
fleet_daily = Table(
    "fleet_daily",
    metadata,
    Column("day", TS, nullable=False),
    *_rollup_columns(Numeric(30, 0)),
    PrimaryKeyConstraint("day", "model", "team", "component", "phase", "owner"),
    Index("ix_fleet_daily_model_day", "model", "day"),
)

# And by week (UTC, from Monday 00:00): a 28-day window reads three or four weeks here and
# only its ragged days from fleet_daily (a third of the rows of days alone).
fleet_weekly = Table(
    "fleet_weekly",
    metadata,
    Column("week", TS, nullable=False),
    *_rollup_columns(Numeric(30, 0)),
    PrimaryKeyConstraint("week", "model", "team", "component", "phase", "owner"),
)

# The fleet rollup summed over models, by hour and by UTC day: what a window without a
# model (the fleet by team or owner, a team's totals, the SLO burns, the charts) reads, a
# twentieth of the rows (about 100 label sets an hour for 500 models, against 1,800).
TEAM_COLUMNS = ("team", "component", "phase", "owner")


def _team_rollup(name: str, column: str) -> Table:
    return Table(
        name,
        metadata,
        Column(column, TS, nullable=False),
        *(Column(label, Text, nullable=False) for label in TEAM_COLUMNS),
        Column("settled_gpu_us", Numeric(30, 0), nullable=False),
        Column("unsettled_gpu_us", Numeric(30, 0), nullable=False),
        PrimaryKeyConstraint(column, *TEAM_COLUMNS),
    )


team_hourly = _team_rollup("team_hourly", "hour")
team_daily = _team_rollup("team_daily", "day")

# What a recompute of everything adds to the team rollups, held back until it ends
# (`result_rows.drain_pending`): appended per chunk, then summed and emptied in one
# transaction. No key: no row is ever looked up.
team_pending = Table(
    "team_pending",
    metadata,
    Column("hour", TS, nullable=False),
    *(Column(label, Text, nullable=False) for label in TEAM_COLUMNS),
    Column("settled", Numeric(30, 0), nullable=False),
    Column("unsettled", Numeric(30, 0), nullable=False),
    # Appended, summed once and emptied: a vacuum or analysis of it is wasted work.
    postgresql_with={"autovacuum_enabled": "false"},
)

# A model's answer per hour, UTC day and UTC week (from Monday), per team it ran under:
# GPU-microseconds held per component, the at-risk part (unsettled effective training) and
# the unreported part (the scheduler's word), the fleet rollup's label rows summed into the
# figures a window by model adds up (service/results/windows.py): one row per model and
# bucket instead of one per label set (about 14 a day).
MODEL_FIGURES = (*(f"{c}_gpu_us" for c in COMPONENTS), "at_risk_gpu_us", "unreported_gpu_us")


def _model_rollup(name: str, column: str) -> Table:
    return Table(
        name,
        metadata,
        Column(column, TS, nullable=False),
        Column("model", Text, nullable=False),
        Column("team", Text, nullable=False),
        *(Column(figure, Numeric(30, 0), nullable=False) for figure in MODEL_FIGURES),
        PrimaryKeyConstraint(column, "model", "team"),
    )


model_hourly = _model_rollup("model_hourly", "hour")
model_daily = _model_rollup("model_daily", "day")
model_weekly = _model_rollup("model_weekly", "week")

# All-time settled GPU-microseconds per label set: the source of the exported counters.
settled_totals = Table(
    "settled_totals",
    metadata,
    Column("model", Text, nullable=False),
    Column("team", Text, nullable=False),
    Column("component", Text, nullable=False),
    Column("owner", Text, nullable=False),
    # NUMERIC: an all-time sum outgrows a bigint (migration 0004).
    Column("settled_gpu_us", Numeric(30, 0), nullable=False),
    PrimaryKeyConstraint("model", "team", "component", "owner"),
)

# Key/value state shared by aggregators (last pass, exported counter high-water marks).
# What checkpoint advice needs from each attempt (ett_core.checkpoints), with the model
# and team denormalised: advice sums a model's attempts that started in a window.
# Microseconds as integers, like every stored duration.
checkpoint_attempts = Table(
    "checkpoint_attempts",
    metadata,
    Column("job_id", Text, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("model", Text, nullable=False),
    Column("team", Text, nullable=False),
    Column("started_at", TS, nullable=False),
    Column("gpus", Integer, nullable=False),
    Column("held_us", BigInteger, nullable=False),
    Column("interrupted", Boolean, nullable=False),
    Column("blocking_save_us", BigInteger, nullable=False),
    Column("durable_checkpoints", Integer, nullable=False),
    Column("intervals_us", ARRAY(BigInteger), nullable=False),
    Column("lost_progress_us", BigInteger, nullable=False),
    Column("ttr_us", BigInteger),
    PrimaryKeyConstraint("job_id", "attempt"),
    Index("ix_checkpoint_attempts_model_started_at", "model", "started_at"),
)

aggregator_state = Table(
    "aggregator_state",
    metadata,
    Column("key", Text, primary_key=True),
    Column("value", JSONB, nullable=False),
    Column("updated_at", TS, nullable=False, server_default=text("now()")),
)

# API tokens. Only a SHA-256 of the secret is stored: the secret is 256 random
# bits, so a fast hash is as safe as a slow one and lets a lookup use the unique index.
api_tokens = Table(
    "api_tokens",
    metadata,
    Column("token_id", Text, primary_key=True),
    Column("secret_sha256", Text, nullable=False, unique=True),
    Column("role", Text, nullable=False),
    Column("team", Text),
    Column("model_patterns", ARRAY(Text), nullable=False, server_default=text("'{}'")),
    Column("note", Text),
    Column("created_at", TS, nullable=False, server_default=text("now()")),
    Column("last_used_at", TS),
    Column("revoked_at", TS),
    CheckConstraint("role IN ('admin', 'writer', 'reader', 'adapter')", name="ck_api_tokens_role"),
)

# Jobs whose computation or storage failed: left out of passes until their
# events change (a dirty_jobs seq above last_seq), listed by GET /v1/admin/quarantine.
aggregation_quarantine = Table(
    "aggregation_quarantine",
    metadata,
    Column("job_id", Text, primary_key=True),
    Column("error", Text, nullable=False),
    Column("last_seq", BigInteger, nullable=False),
    Column("since", TS, nullable=False),
    Column("failed_at", TS, nullable=False),
    Column("failures", Integer, nullable=False),
)

# Each job's model and team, fixed by its first stored event: ingest refuses a later
# event that names another (a writer can never move another team's job).
job_owners = Table(
    "job_owners",
    metadata,
    Column("job_id", Text, primary_key=True),
    Column("model", Text, nullable=False),
    Column("team", Text),
)

# A lower bound of each job's earliest stored event instant (to the second), kept by the
# aggregator from the queue rows it consumes and the events it loads: what tells retention
# which jobs can have events in a month partition without reading the partition
# (store/retention.py). Events still queued are bounded by their queue rows instead.
job_first_ts = Table(
    "job_first_ts",
    metadata,
    Column("job_id", Text, primary_key=True),
    Column("first_ts", TS, nullable=False),
    Index("ix_job_first_ts_first_ts", "first_ts"),
)

# Per job, what a cohort sums (docs/impact.md): GPU-microseconds per Level-1
# overhead term and component, so a cohort of 10,000 jobs is one indexed sum.
IMPACT_TERMS = ("tts", "ttr", "in_loop_overhead", "final_shutdown")
IMPACT_COMPONENTS = ("scheduling", "initialization", "compilation", "effective_training",
                     "wasted_training", "shutdown", "unattributed")


def impact_column(term: str, component: str) -> str:
    return f"{term}_{component}_gpu_us"


job_impact = Table(
    "job_impact",
    metadata,
    Column("job_id", Text, primary_key=True),
    Column("model", Text, nullable=False),
    Column("team", Text, nullable=False),
    Column("first_at", TS, nullable=False),  # the first allocation: what selects a cohort
    Column("running", Boolean, nullable=False),
    Column("labels", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("held_gpu_us", BigInteger, nullable=False),
    Column("effective_gpu_us", BigInteger, nullable=False),
    Column("nof", Integer, nullable=False),
    Column("tts_us", BigInteger, nullable=False),
    Column("ttr_us", BigInteger, nullable=False),
    *(Column(impact_column(t, c), BigInteger, nullable=False)
      for t in IMPACT_TERMS for c in IMPACT_COMPONENTS),
    Index("ix_job_impact_first_at", "first_at"),
)

# Changes worth a marker: dashboards draw them, `/v1/impact?around=` compares either side.
annotations = Table(
    "annotations",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("ts", TS, nullable=False),
    Column("title", Text, nullable=False),
    Column("text", Text),
    Column("team", Text),
    Column("models", ARRAY(Text), nullable=False, server_default=text("'{}'")),
    Column("tags", ARRAY(Text), nullable=False, server_default=text("'{}'")),
    Column("created_by", Text),
    Column("created_at", TS, nullable=False, server_default=text("now()")),
    Index("ix_annotations_ts", "ts"),
)
