"""The read routes' answers as pydantic models: their `response_model`, so `/docs` shows
what comes back as well as what goes in.

The answers themselves are built as plain dicts (service/results/, service/api/read_routes.py);
these models describe them. Every model lets unnamed fields through (`extra="allow"`), so a
field added to an answer is never dropped on the way out, and the routes leave out fields
an answer does not hold (`response_model_exclude_unset`), so an optional `note` stays absent
rather than `null`. docs/model.md ("Reading results") defines each field.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Answer(BaseModel):
    model_config = ConfigDict(extra="allow")


# --- GET /v1/ett, /v1/models, /v1/teams/{team}/bill -----------------------------------

class EttGroup(Answer):
    key: str | None = Field(description="the group's model, team, component or owner;"
                                        " null with group_by=none")
    held_gpu_seconds: float
    effective_gpu_seconds: float
    at_risk_gpu_seconds: float = Field(description="effective time that can still change")
    ett_ratio: float | None = Field(description="effective / held; null when nothing was held")
    components: dict[str, float] = Field(description="GPU-seconds of each of the seven"
                                                     " components")
    unreported_gpu_seconds: float = Field(description="held time only the scheduler saw")
    unreported_ratio: float | None
    queue_seconds: float = Field(description="queue time the scheduler reported (beside ETT)")


class EttWindow(Answer):
    start: str
    end: str
    group_by: str
    groups: list[EttGroup]
    note: str | None = Field(None, description="why the answer is empty, when it is")


class ModelOverview(Answer):
    model: str
    team: str
    ett_ratio_1d: float | None
    ett_ratio_7d: float | None
    held_gpu_hours_1d: float
    held_gpu_hours_7d: float
    at_risk_gpu_hours_1d: float
    unreported_ratio_7d: float | None
    queue_seconds_7d: float


class ModelsOverview(Answer):
    as_of: str
    models: list[ModelOverview]
    note: str | None = Field(None, description="present when no job has been posted yet")


class TeamBill(Answer):
    team: str
    start: str
    end: str
    lost_gpu_hours: float = Field(description="GPU-hours the team owns that were not"
                                              " effective training")
    by_phase: dict[str, float]
    by_model: dict[str, float]
    by_component: dict[str, float]
    note: str | None = Field(None, description="why the bill is empty, when it is")


# --- GET /v1/jobs/{job_id} --------------------------------------------------------------

class JobDocument(Answer):
    """docs/model.md section 7; every field optional because a stored document is returned
    as the aggregator wrote it."""

    job_id: str | None = None
    model: str | None = None
    team: str | None = None
    state: str | None = None
    attempts: list[dict[str, Any]] | None = None
    held_seconds: float | None = None
    effective_seconds: float | None = None
    at_risk_seconds: float | None = None
    ett_ratio: float | None = None
    components: dict[str, float] | None = None
    phases: dict[str, float] | None = None
    owners: dict[str, float] | None = None
    level1: dict[str, Any] | None = None
    diagnostics: dict[str, Any] | None = None
    labels: dict[str, str] | None = None


# --- checkpoint advice, impact, what-if -------------------------------------------------

class CheckpointAdvice(Answer):
    """docs/checkpoints.md."""

    model: str
    start: str
    end: str
    status: str
    reason: str | None = None
    interval_seconds: dict[str, float | None] | None = None
    projected_saving_gpu_hours_per_day: float | None = None


class ImpactReport(Answer):
    """docs/impact.md: the two cohorts and what the candidate gained."""

    baseline: dict[str, Any]
    candidate: dict[str, Any]
    delta_ett_pp: float | None = None
    annotation: dict[str, Any] | None = Field(None, description="with around=: the annotation")


class WhatIf(Answer):
    """docs/impact.md: the projected ETT if one component's time shrank."""

    cohort: dict[str, Any]
    component: str
    reduction: float
    ett_ratio: float | None = None
    projected_ett_ratio: dict[str, float | None]
    gpu_seconds_saved: dict[str, float]


# --- annotations ------------------------------------------------------------------------

class Annotation(Answer):
    id: int
    ts: str
    title: str
    text: str | None
    team: str | None = Field(description="null: fleet-wide")
    models: list[str]
    tags: list[str]
    created_by: str | None


class AnnotationPage(Answer):
    start: str
    end: str
    annotations: list[Annotation]
    next: str | None = Field(description="the `cursor` of the following page; null on the"
                                         " last one")


class Created(Answer):
    id: int


# --- admin and probes -------------------------------------------------------------------

class PassAnswer(Answer):
    started_at: str
    finished_at: str | None
    duration_seconds: float
    jobs_recomputed: int
    jobs_skipped_locked: int
    jobs_failed: int
    jobs_quarantined: int
    lag_seconds: float


class QuarantinedJob(Answer):
    job_id: str
    error: str
    last_event_seq: int
    since: str
    last_failed_at: str
    failures: int


class Quarantine(Answer):
    count: int
    jobs: list[QuarantinedJob]


class Health(Answer):
    status: str


class Readiness(Answer):
    status: str = Field(description="ready or not ready (503)")
    database: str
    migration: str | None = None
    head: str | None = None
    error: str | None = None
