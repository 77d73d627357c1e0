"""Settings from the environment (prefix ETT_), built once at start-up and passed down."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ETT_", extra="ignore")

    database_url: str | None = Field(
        default=None,
        description="postgresql:// or postgresql+psycopg:// URL; unset: embedded PostgreSQL",
    )
    data_dir: Path = Field(default=Path(".ett-data"), description="embedded database and token")
    admin_token: SecretStr | None = None
    taxonomy: Path | None = Field(default=None, description="taxonomy YAML; unset: default")
    slo_file: Path = Field(default=Path("deploy/slo.yaml"),
                           description="SLO file the console reads for its team pages")
    otlp_mapping: Path | None = Field(
        default=None, description="OTLP span mapping YAML (docs/otlp.md); unset: the defaults")
    heartbeat_timeout_s: float = Field(default=600.0, gt=0)

    aggregate_interval_s: float = Field(default=30.0, gt=0)
    aggregate_batch_jobs: int = Field(default=200, ge=1)
    # A recompute of everything commits fewer, larger chunks: each one's fixed statements
    # are paid less often (docs/performance.md, aggregation round 11).
    recompute_batch_jobs: int = Field(default=500, ge=1)

    max_body_bytes: int = Field(default=5 * 1024 * 1024, ge=1024)
    max_batch_events: int = Field(default=5000, ge=1)
    max_future_skew_s: float = Field(default=300.0, ge=0)
    max_event_age_days: float = Field(
        default=400.0, gt=0, description="events older than this are rejected (retention horizon)"
    )
    ingest_max_age: timedelta = Field(
        default=timedelta(days=7),
        description="a writer's events older than this are rejected; an admin token backfills"
                    " up to the retention horizon (seconds, or ISO 8601 such as P7D)",
    )

    db_pool_size: int = Field(default=8, ge=1)
    db_pool_timeout_s: float = Field(default=5.0, gt=0)
    db_statement_timeout_ms: int = Field(default=30_000, ge=0)

    ingest_max_in_flight: int = Field(
        default=4096, ge=1, description="concurrent POST /v1/events per process; more get 503"
    )
    ingest_max_in_flight_bytes: int = Field(
        default=64 * 1024 * 1024, ge=1024,
        description="request-body bytes in flight per process; more get 503",
    )
    ingest_max_in_flight_per_token: int = Field(
        default=1024, ge=1,
        description="concurrent POST /v1/events per token per process; more get 503",
    )
    ingest_fair_lag_ms: float = Field(
        default=10.0, ge=0,
        description="while the event loop runs this late, a token whose recent rate of ingest"
                    " requests is at least 1.25 times the other tokens' mean waits its turn"
                    " (0: the loop's lateness is not a signal)",
    )
    ingest_fair_store_lag_ms: float = Field(
        default=10.0, ge=0,
        description="while the group commits take this much longer than their best of the"
                    " last one to two minutes, a token sending at 1.25 times the"
                    " other tokens' mean rate waits its turn, as with ETT_INGEST_FAIR_LAG_MS"
                    " (0: the store's lag is not a signal)",
    )
    ingest_fair_max_wait_ms: float = Field(
        default=1000.0, ge=0,
        description="an ingest request waits at most this long for its token's turn",
    )
    ingest_body_deadline_s: float = Field(
        default=30.0, gt=0, description="a request body must arrive within this; else 408",
    )
    ingest_statement_timeout_ms: int = Field(
        default=10_000, ge=0, description="an ingest transaction's statement timeout (0: none)"
    )
    ingest_store_deadline_s: float = Field(
        default=20.0, ge=0,
        description="a request's events must be committed within this, else 503 + Retry-After"
                    " and the connection is dropped (a database that stopped answering"
                    " without closing its connections); 0: no deadline",
    )
    group_commit_ms: float = Field(
        default=3.0, ge=0,
        description="a small ingest batch waits at most this long for others to be stored"
                    " with in one transaction (0: each batch alone)",
    )
    group_commit_max_rows: int = Field(
        default=1000, ge=1,
        description="a group is stored as soon as it holds this many events; a batch this"
                    " large is stored alone",
    )
    otlp_max_spans: int = Field(
        default=20_000, ge=1, description="spans in one POST /v1/traces; more get 413",
    )
    otlp_max_attributes: int = Field(
        default=200_000, ge=1,
        description="attributes (each resource's once, each span's) in one POST /v1/traces;"
                    " more get 413",
    )
    work_processes: int = Field(
        default=2, ge=1, description="worker processes that decode and validate request bodies",
    )
    work_queue: int = Field(
        default=16, ge=0,
        description="requests waiting for a worker process; more get 503 + Retry-After",
    )
    annotation_max_body_bytes: int = Field(
        default=64 * 1024, ge=1024, description="body of POST /v1/annotations; more get 413",
    )
    annotations_max_per_team: int = Field(
        default=1000, ge=1,
        description="annotations per team (fleet-wide ones count as one team); more get 409",
    )
    console_max_sessions: int = Field(
        default=10_000, ge=1, description="console sessions per process",
    )
    console_sessions_per_token: int = Field(
        default=20, ge=1, description="console sessions per token; its oldest goes first",
    )
    token_cache_ttl_s: float = Field(
        default=3.0, gt=0, le=60, description="token lookups cached this long (revocation delay)"
    )
    token_last_used_flush_s: float = Field(
        default=10.0, gt=0, description="last-use times of tokens are written this often"
    )

    log_level: str = "info"
    metrics_max_models_per_team: int = Field(
        default=200, ge=1,
        description="model series per team on /metrics; the rest are summed as model=other",
    )
    metrics_max_teams: int = Field(
        default=100, ge=1,
        description="team series on /metrics; the rest are summed as team=other",
    )
    metrics_auth: bool = Field(
        default=False, description="require a token (any role) on /metrics; probes stay open"
    )

    def admin_token_value(self) -> str | None:
        return self.admin_token.get_secret_value() if self.admin_token else None


def default(name: str) -> Any:
    """The default of setting `name`: what a part built without a `Settings` takes (the
    aggregator in a test or a bench), so every default is written here only."""
    return Settings.model_fields[name].default
