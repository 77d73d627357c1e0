"""Bounds, reserved names and strict RFC 3339.

Every integer field has an upper bound chosen so that no stored sum overflows
(docs/model.md, "Bounds"); the fast path of `validate_batch` agrees with `validate_event`.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from service.access.auth import Principal
from service.wire.batch import validate_batch
from service.wire.event import MAX_ATTEMPT, MAX_GPUS, MAX_RANK, WireError, validate_event
from tests.factories import event

NOW = datetime(2026, 11, 2, tzinfo=UTC)
LIMITS = {"max_future_s": 300.0, "max_age_s": 30 * 86400.0}
ADMIN = Principal(role="admin", token_id="t")


def decide(ev: dict) -> str | None:
    """The error `validate_event` gives, and check the batch fast path says the same."""
    try:
        validate_event(ev, now=NOW, **LIMITS)
        single = None
    except WireError as exc:
        single = str(exc)
    batch = validate_batch([ev], ADMIN, now=NOW, **LIMITS)
    assert [r["error"] for r in batch.rejected] == ([] if single is None else [single])
    return single


@pytest.mark.parametrize(("field", "value", "ok"), [
    ("gpus", MAX_GPUS, True), ("gpus", MAX_GPUS + 1, False), ("gpus", 2**31 - 1, False),
    ("attempt", MAX_ATTEMPT, True), ("attempt", MAX_ATTEMPT + 1, False),
    ("rank", MAX_RANK, True), ("rank", MAX_RANK + 1, False),
])
def test_integer_fields_have_upper_bounds(field: str, value: int, ok: bool) -> None:
    ev = event("allocated", 60 * 24, gpus=8)
    ev[field] = value
    error = decide(ev)
    assert (error is None) == ok, error
    bound = {"gpus": MAX_GPUS, "attempt": MAX_ATTEMPT, "rank": MAX_RANK}[field]
    if not ok:
        assert error == f"{field}: must be <= {bound}, got {value}"


def test_the_bound_keeps_a_million_gpus_for_a_day_inside_a_bigint() -> None:
    # The tightest stored sum: one day row of one model. 2**20 GPUs x 86400 s x 1e6 us/s
    # = 9.06e16 GPU-us, a hundredth of 2**63. A hostile writer's hundred such jobs of one
    # model could still pass 2**63: that job is quarantined (tests/results/test_quarantine.py).
    assert MAX_GPUS * 86_400 * 1_000_000 == 90_596_966_400_000_000 < 2**63 // 100


def test_checkpoint_step_is_bounded() -> None:
    ev = event("checkpoint", 60 * 24, attrs={"step": 2**53})
    assert decide(ev) is None
    ev["attrs"]["step"] = 2**53 + 1
    assert "attrs.step" in decide(ev)


@pytest.mark.parametrize("phase", ["lost_progress", "unattributed", "stalled"])
def test_reserved_phases_are_refused_from_trainers(phase: str) -> None:
    error = decide(event("phase_start", 60 * 24, phase=phase))
    assert error == f"phase: {phase!r} is reserved for what the engine derives"


@pytest.mark.parametrize("ts", [
    "2026-11-01t05:38:36z", "2026-11-01T05:38:36z", "2026-11-01t05:38:36Z",
    "2026-11-01T05:38:36.123456789Z", "2026-11-01T07:38:36+02:00", "2026-11-01 05:38:36Z",
])
def test_every_rfc3339_form_is_accepted(ts: str) -> None:
    ev = event("heartbeat", 0)
    ev["ts"] = ts
    assert decide(ev) is None


@pytest.mark.parametrize("ts", [
    "2026-W44-7T05:38:36Z", "20261101T053836Z", "2026-11-01T05Z", "2026-11-01T05:38Z",
    "2026-305T05:38:36Z", "2026-11-01T05:38:36+0200", "2026-11-01T05:38:36,5Z",
])
def test_iso_8601_forms_outside_rfc3339_are_refused(ts: str) -> None:
    ev = event("heartbeat", 0)
    ev["ts"] = ts
    error = decide(ev)
    assert error is not None and error.startswith("ts: ") and "RFC 3339" in error
