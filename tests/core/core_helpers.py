"""Builders for the core's tests: events in minutes from an arbitrary epoch instant."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ett_core import Event, JobComputation, Taxonomy, compute_job

BASE_US = 1_700_000_000_000_000  # 2023-11-14T22:13:20Z
MINUTE_US = 60_000_000


def at(minute: float) -> int:
    return BASE_US + round(minute * MINUTE_US)


def minutes(duration_us: float) -> float:
    return duration_us / MINUTE_US


class Job:
    """Accumulates one job's events; ids are deterministic so failures reproduce."""

    def __init__(self, job_id: str = "job-1", model: str = "llama", team: str | None = None):
        self.job_id = job_id
        self.model = model
        self.team = team
        self.events: list[Event] = []

    def add(self, type: str, minute: float, attempt: int = 0, **fields: Any) -> Job:
        attrs = fields.pop("attrs", {})
        self.events.append(
            Event(
                event_id=f"{self.job_id}-{len(self.events):05d}",
                ts_us=at(minute),
                job_id=self.job_id,
                attempt=attempt,
                model=self.model,
                type=type,
                team=fields.pop("team", self.team),
                attrs=attrs,
                **fields,
            )
        )
        return self

    def allocated(self, minute: float, attempt: int = 0, gpus: int | None = 8) -> Job:
        return self.add("allocated", minute, attempt, gpus=gpus)

    def released(self, minute: float, attempt: int = 0, reason: str = "completed") -> Job:
        return self.add("released", minute, attempt, attrs={"reason": reason})

    def phase(
        self, name: str, start: float, end: float | None, attempt: int = 0, **attrs: Any
    ) -> Job:
        self.add("phase_start", start, attempt, phase=name, attrs=attrs)
        if end is not None:
            self.add("phase_end", end, attempt, phase=name)
        return self

    def failure(self, minute: float, attempt: int = 0, cause: str = "infra") -> Job:
        return self.add("failure", minute, attempt, attrs={"cause": cause})

    def checkpoint(self, minute: float, attempt: int = 0, snapshot: float | None = None) -> Job:
        attrs: dict[str, Any] = {"step": 1}
        if snapshot is not None:
            attrs["snapshot_ts"] = at(snapshot) / 1_000_000
        return self.add("checkpoint", minute, attempt, attrs=attrs)

    def heartbeat(self, minute: float, attempt: int = 0, **fields: Any) -> Job:
        return self.add("heartbeat", minute, attempt, **fields)


def compute(
    events: Iterable[Event],
    now: float = 10_000,
    timeout: float = 10,
    taxonomy: Taxonomy | None = None,
) -> JobComputation:
    return compute_job(
        list(events),
        taxonomy=taxonomy or Taxonomy.default(),
        now_us=at(now),
        heartbeat_timeout_us=round(timeout * MINUTE_US),
    )


def in_minutes(mapping: Any) -> dict[str, float]:
    """A us mapping as minutes, zeros dropped, for readable assertions."""
    return {k: minutes(v) for k, v in dict(mapping).items() if v}
