"""Who a Slurm job is to ETT: its job id, attempt, model, team and GPUs, and event ids.

The SDK derives the same job id and attempt inside the job (client/ett_client/config.py),
so trainer and scheduler land on one job with no configuration.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

# A fixed namespace: every adapter, hook or reconciler, anywhere, derives the same ids.
_NAMESPACE = uuid.UUID("5b0f6d8e-3c0a-4f6e-9a51-2d1b7e0c9f43")
_UNSAFE = re.compile(r"[^A-Za-z0-9._:/-]")
_COMMENT = re.compile(r"ett:([^\s]*)")
_GPU = re.compile(r"gres/gpu=(\d+)")
_TYPED_GPU = re.compile(r"gres/gpu:[^=,]+=(\d+)")


def job_id_of(cluster: str, slurm_job_id: str) -> str:
    """`slurm:<cluster>:<job id>`: unique across clusters, stable across requeues."""
    return f"slurm:{cluster}:{slurm_job_id}"


def event_id(job_id: str, attempt: int, kind: str) -> str:
    """One id per fact (allocation, release, failure of one attempt): retries, hooks and
    reconciler runs all send the same id, and the service stores it once."""
    return str(uuid.uuid5(_NAMESPACE, f"{job_id}/{attempt}/{kind}"))


def safe_name(value: str) -> str | None:
    """A Slurm name as an ETT name (1-200 of [A-Za-z0-9._:/-]); None when nothing is left."""
    cleaned = _UNSAFE.sub("_", value.strip())[:200]
    return cleaned if cleaned.strip("_") else None


@dataclass(frozen=True)
class Mapping:
    model: str
    team: str | None
    source: str  # comment, job_name, default: where the model came from


def mapping(comment: str | None, job_name: str | None, account: str | None,
            default_model: str = "slurm-unnamed") -> Mapping:
    """The documented mapping (docs/slurm.md): `--comment "ett:model=M;team=T"` first, else
    the job name for the model and the account for the team."""
    found: dict[str, str] = {}
    match = _COMMENT.search(comment or "")
    if match:
        for part in match.group(1).split(";"):
            key, _, value = part.partition("=")
            if key in ("model", "team") and value:
                found.setdefault(key, value)
    model = safe_name(found.get("model", ""))
    source = "comment"
    if model is None:
        model, source = safe_name(job_name or ""), "job_name"
    if model is None:
        model, source = default_model, "default"
    team = safe_name(found.get("team", "")) or safe_name(account or "")
    return Mapping(model=model, team=team, source=source)


def gpus_of(tres: str | None) -> int | None:
    """The GPU count in a TRES string (`AllocTRES`, `TRES=`), None when it names none."""
    if not tres:
        return None
    plain = _GPU.search(tres)
    if plain:
        return int(plain.group(1)) or None
    typed = sum(int(n) for n in _TYPED_GPU.findall(tres))
    return typed or None
