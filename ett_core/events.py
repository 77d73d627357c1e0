"""Events: the core's input record, its deterministic order and de-duplication.

Order is event time, never arrival: a late or re-delivered batch must give exactly the
result an in-order stream gives (the peer tool that ordered by arrival mistook duplicate
delivery for restarts).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from ett_core.instants import parse_rfc3339_us

EVENT_TYPES = (
    "allocated",
    "released",
    "phase_start",
    "phase_end",
    "checkpoint",
    "failure",
    "heartbeat",
)
# The types that name a phase (and so must carry one).
PHASE_TYPES = frozenset(("phase_start", "phase_end"))
# A failure event's `attrs.cause`, and a released event's `attrs.reason`.
FAILURE_CAUSES = ("infra", "user", "preemption")
RELEASE_REASONS = ("completed", "failed", "preempted", "cancelled")

# Tie-break for events at the same instant. Each position is deliberate:
# - allocated first: nothing is held before it, so nothing at that instant precedes it;
# - checkpoint before phase_end: a checkpoint durable at the instant its save phase ends
#   still finds that phase open (its start is the snapshot when attrs has none);
# - phase_end before failure and before phase_start: a phase that ends and one (even of the
#   same name) that starts at one instant must not nest, and the end must close the old
#   phase, not the new one;
# - checkpoint before failure: a checkpoint durable at the failure instant counts;
# - failure before phase_start: a teardown starting at the failure instant survives the
#   failure closing every open phase;
# - released last: events at the release instant still belong to the attempt.
TYPE_RANK = {
    "allocated": 0,
    "checkpoint": 1,
    "phase_end": 2,
    "failure": 3,
    "heartbeat": 4,
    "phase_start": 5,
    "released": 6,
}
_UNKNOWN_TYPE_RANK = len(TYPE_RANK)


# The only event types whose attrs the core reads in full (failure cause, release reason,
# background phases, checkpoint snapshot_ts, the scheduler's source). Of every other type
# it reads only the step counter of rank 0 (ett_core.stalls.STEP_ATTR): a loader may leave
# out the rest, such as the loss on each heartbeat, and the result cannot change
# (tests/core/test_core_properties.py holds the core to it).
ATTRS_READ = frozenset({"failure", "released", "phase_start", "checkpoint"})
# The scheduler's word (ett_core.scheduler) reads `source` on every type a scheduler may
# send, and `queued_at` and `gpus_assumed` on its allocation.
ATTRS_READ = ATTRS_READ | {"allocated", "phase_end"}

# The default `attrs`: one shared object, so it must be read-only.
NO_ATTRS: Mapping[str, Any] = MappingProxyType({})


class Event(NamedTuple):
    """One wire event, with `ts` as integer epoch microseconds UTC.

    A named tuple rather than a frozen dataclass: a full recompute builds one per stored
    event, and `Event._make(row)` straight from a database row costs a fifth of a frozen
    dataclass's `__init__` (docs/performance.md). Two events are equal when every field is.
    """

    event_id: str
    ts_us: int
    job_id: str
    attempt: int
    model: str
    type: str
    phase: str | None = None
    gpus: int | None = None
    team: str | None = None
    rank: int | None = None
    attrs: Mapping[str, Any] = NO_ATTRS

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Event:
        """Build an Event from a validated wire event (docs/model.md section 5)."""
        attrs = data.get("attrs")
        return cls(
            event_id=str(data["event_id"]),
            ts_us=parse_rfc3339_us(data["ts"]),
            job_id=data["job_id"],
            attempt=data["attempt"],
            model=data["model"],
            type=data["type"],
            phase=data.get("phase"),
            gpus=data.get("gpus"),
            team=data.get("team"),
            rank=data.get("rank"),
            attrs=dict(attrs) if isinstance(attrs, Mapping) else {},
        )

    @property
    def on_timeline(self) -> bool:
        """Rank 0 (or no rank) builds the job timeline; other ranks are per-rank detail."""
        return self.rank is None or self.rank == 0


def sort_key(event: Event) -> tuple[int, int, str]:
    return (event.ts_us, TYPE_RANK.get(event.type, _UNKNOWN_TYPE_RANK), event.event_id)


def _content_key(event: Event) -> tuple[Any, ...]:
    # Only used when two different bodies share an event_id (a client bug): the choice of
    # which one wins must not depend on delivery order.
    raw = event.attrs
    try:
        # A read-only mapping (NO_ATTRS) must compare as the plain object it stands for.
        attrs = json.dumps(dict(raw) if isinstance(raw, Mapping) else raw, sort_keys=True,
                           default=repr)
    except (TypeError, ValueError):
        attrs = repr(event.attrs)
    return (
        sort_key(event),
        repr(event.job_id),
        repr(event.attempt),
        repr(event.model),
        repr(event.phase),
        repr(event.gpus),
        repr(event.team),
        repr(event.rank),
        attrs,
    )


def order_events(events: Iterable[Event]) -> tuple[tuple[Event, ...], int]:
    """Return the events de-duplicated by event_id and instant (the store's key within a
    job: the same id at another instant is another event), in event order, and the drop
    count."""
    by_id: dict[tuple[str, int], Event] = {}
    seen = 0
    for event in events:
        seen += 1
        key = (event.event_id, event.ts_us)
        kept = by_id.get(key)
        if kept is None or (kept != event and _content_key(event) < _content_key(kept)):
            by_id[key] = event
    ordered = tuple(sorted(by_id.values(), key=sort_key))
    return ordered, seen - len(ordered)
