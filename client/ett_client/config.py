"""Recorder settings: explicit arguments first, then ``ETT_*`` environment variables.

Resolved once, in the constructor, into a frozen :class:`Settings`; nothing reads the
environment afterwards (so a test or a launcher can change it between recorders).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ett_client.errors import ConfigurationError

NAME_RE = re.compile(r"^[A-Za-z0-9._:/-]{1,200}$")
MEMORY_SPOOL = ":memory:"
FAILURE_CAUSES = ("infra", "user", "preemption")

# Launchers that count restarts, in order of preference.
_ATTEMPT_ENV = ("ETT_ATTEMPT", "TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT")
_TRUE = {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class Settings:
    url: str
    token: str | None
    job_id: str
    model: str
    attempt: int
    gpus: int
    team: str | None
    rank: int
    all_ranks: bool
    strict: bool
    spool_dir: str  # a directory, or MEMORY_SPOOL
    sigterm_cause: str
    # False when a scheduler adapter names the job (Slurm) and no SIGTERM cause was given:
    # the scheduler knows why it sent the signal (cancel, requeue, time limit), a guess here
    # would outrank it (docs/model.md, "End cause").
    sigterm_reports_failure: bool = True
    max_queue: int = 10_000
    max_batch: int = 500
    max_batch_bytes: int = 1 << 20
    send_interval_s: float = 1.0
    spool_interval_s: float = 0.05
    fsync_interval_s: float = 1.0
    request_timeout_s: float = 5.0
    backoff_base_s: float = 0.5
    backoff_max_s: float = 30.0
    retry_after_max_s: float = 300.0
    exit_timeout_s: float = 3.0
    spool_max_bytes: int = 512 << 20
    rescan_interval_s: float = 30.0
    # Seconds between the heartbeat thread's heartbeats (ett_client.beat), from allocated()
    # to the release; 0: no thread (heartbeats only when the script calls heartbeat()).
    heartbeat_s: float = 0.0

    @property
    def enabled(self) -> bool:
        """Only rank 0 records the job timeline unless every rank was asked to."""
        return self.all_ranks or self.rank == 0

    @property
    def events_url(self) -> str:
        return self.url.rstrip("/") + "/v1/events"


def _int_env(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError as exc:
        raise ConfigurationError(f"{name}={raw!r} is not an integer") from exc


def _heartbeat_env(raw: str) -> float:
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise ConfigurationError(f"ETT_HEARTBEAT_S must be seconds >= 0, got {raw!r}")
    return seconds


def resolve_attempt(env: Mapping[str, str], names: tuple[str, ...] = _ATTEMPT_ENV) -> int:
    """The restart index: ETT_ATTEMPT, torchelastic's or Slurm's restart count, else 0."""
    for name in names:
        value = _int_env(env, name)
        if value is not None:
            return value
    return 0


def slurm_job_id(env: Mapping[str, str]) -> str | None:
    """Under Slurm, the job id the scheduler adapter (`ett slurm`) gives the same job:
    ``slurm:<cluster>:<job id>``, so a trainer lands on the scheduler's job unconfigured."""
    job = env.get("SLURM_JOB_ID", "").strip()
    cluster = env.get("SLURM_CLUSTER_NAME", "").strip()
    if job.isdigit() and cluster:
        return f"slurm:{cluster}:{job}"
    return None


def _slurm_model(env: Mapping[str, str]) -> str | None:
    # The adapter's fallback mapping: the job name, made a valid name.
    name = re.sub(r"[^A-Za-z0-9._:/-]", "_", env.get("SLURM_JOB_NAME", "").strip())[:200]
    return name if name.strip("_") else None


def default_spool_dir(job_id: str, env: Mapping[str, str]) -> str:
    """A per-job directory under the user's cache, so restarts on one host find leftovers.

    Per job because a spool may only be replayed with a token allowed to write its model.
    """
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", job_id)
    return str(Path(base) / "ett-client" / "spool" / safe)


def resolve(
    *,
    url: str | None,
    token: str | None,
    job_id: str | None,
    model: str | None,
    attempt: int | None,
    gpus: int | None,
    team: str | None,
    spool_dir: str | os.PathLike[str] | None,
    all_ranks: bool,
    strict: bool | None,
    sigterm_cause: str | None,
    tuning: Mapping[str, float | int],
    env: Mapping[str, str] | None = None,
) -> Settings:
    env = os.environ if env is None else env
    strict_flag = strict if strict is not None else env.get("ETT_STRICT", "").lower() in _TRUE
    url = url or env.get("ETT_URL")
    token = token or env.get("ETT_TOKEN") or None
    from_slurm = not (job_id or env.get("ETT_JOB_ID")) and slurm_job_id(env) is not None
    job_id = job_id or env.get("ETT_JOB_ID") or slurm_job_id(env)
    model = model or env.get("ETT_MODEL") or (_slurm_model(env) if from_slurm else None)
    team = team or env.get("ETT_TEAM") or None
    if not url:
        raise ConfigurationError("no service URL: pass url= or set ETT_URL")
    if not url.startswith(("http://", "https://")):
        raise ConfigurationError(f"url must be http(s)://..., got {url!r}")
    for field, value in (("job_id", job_id), ("model", model)):
        if not value:
            raise ConfigurationError(f"no {field}: pass {field}= or set ETT_{field.upper()}")
        if not NAME_RE.match(value):
            raise ConfigurationError(
                f"{field}={value!r} must be 1-200 characters of [A-Za-z0-9._:/-]"
            )
    assert job_id is not None and model is not None  # narrowed above
    if attempt is None:
        # A job named by Slurm counts its attempts as Slurm does (its restart count), the
        # way the adapter does, unless the trainer sets ETT_ATTEMPT.
        attempt = resolve_attempt(env, ("ETT_ATTEMPT", "SLURM_RESTART_COUNT")
                                  if from_slurm else _ATTEMPT_ENV)
    if gpus is None:
        # torchrun starts one process per accelerator, so WORLD_SIZE is a fair default.
        gpus = _int_env(env, "ETT_GPUS") or _int_env(env, "WORLD_SIZE") or 1
    if attempt < 0 or gpus < 1:
        raise ConfigurationError(f"attempt must be >= 0 and gpus >= 1 (got {attempt}, {gpus})")
    rank = _int_env(env, "RANK") or 0
    if spool_dir is None:
        spool_dir = env.get("ETT_SPOOL_DIR") or default_spool_dir(job_id, env)
    if "heartbeat_s" not in tuning and env.get("ETT_HEARTBEAT_S"):
        tuning = {**tuning, "heartbeat_s": _heartbeat_env(env["ETT_HEARTBEAT_S"])}
    explicit_cause = sigterm_cause or env.get("ETT_SIGTERM_CAUSE")
    cause = explicit_cause or "preemption"
    if cause not in FAILURE_CAUSES:
        raise ConfigurationError(f"sigterm_cause must be one of {FAILURE_CAUSES}, got {cause!r}")
    return Settings(
        url=url, token=token, job_id=job_id, model=model, attempt=attempt, gpus=gpus,
        team=team, rank=rank, all_ranks=all_ranks, strict=strict_flag,
        spool_dir=os.fspath(spool_dir), sigterm_cause=cause,
        sigterm_reports_failure=bool(explicit_cause) or not from_slurm,
        **tuning,  # type: ignore[arg-type]
    )
