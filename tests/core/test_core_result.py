"""JobResult.to_wire: the docs/model.md section 7 document."""

from __future__ import annotations

from core_helpers import Job, compute
from test_core_worked_example import worked_example

from ett_core.taxonomy import COMPONENTS

TOP_KEYS = {
    "job_id",
    "model",
    "team",
    "state",
    "attempts",
    "held_seconds",
    "effective_seconds",
    "at_risk_seconds",
    "ett_ratio",
    "queue_seconds",
    "unreported_seconds",
    "unreported_ratio",
    "uninstrumented_held_seconds",
    "components",
    "phases",
    "owners",
    "level1",
    "diagnostics",
    "progress",
}
LEVEL1_KEYS = {
    "tts_seconds",
    "nof",
    "nof_by_cause",
    "ttr_seconds",
    "mean_ttr_seconds",
    "in_loop_overhead_seconds",
    "final_shutdown_seconds",
    "breakdown",
}
ATTEMPT_KEYS = {
    "attempt",
    "allocated_at",
    "released_at",
    "gpus",
    "end_cause",
    "held_seconds",
    "startup_seconds",
    "held_by",
    "instrumented",
    "queued_at",
    "queue_seconds",
    "trainer_first_at",
    "trainer_last_at",
}


def test_the_wire_document_has_exactly_the_spec_keys_plus_diagnostics_and_breakdown():
    wire = compute(worked_example().events).result.to_wire()
    assert set(wire) == TOP_KEYS
    assert set(wire["level1"]) == LEVEL1_KEYS
    assert all(set(a) == ATTEMPT_KEYS for a in wire["attempts"])
    assert list(wire["components"]) == list(COMPONENTS)
    assert set(wire["level1"]["breakdown"]) == {
        "effective",
        "tts",
        "ttr",
        "in_loop_overhead",
        "final_shutdown",
    }


def test_durations_are_float_seconds_and_instants_are_rfc3339_utc():
    wire = compute(worked_example().events).result.to_wire()
    assert isinstance(wire["held_seconds"], float)
    assert wire["attempts"][1]["allocated_at"] == "2023-11-14T23:38:20Z"
    assert all(isinstance(v, float) for v in wire["components"].values())


def test_an_open_attempt_has_no_release_and_a_job_with_no_recovery_has_no_mean_ttr():
    wire = compute(
        Job().allocated(0).phase("training", 0, None).events, now=1, timeout=10
    ).result.to_wire()
    assert wire["state"] == "running"
    assert wire["attempts"][0]["released_at"] is None
    assert wire["attempts"][0]["end_cause"] == "running"
    assert wire["level1"]["mean_ttr_seconds"] is None


def test_nothing_held_gives_a_null_ratio():
    wire = compute(Job().allocated(0).released(0).events).result.to_wire()
    assert (wire["held_seconds"], wire["ett_ratio"]) == (0.0, None)
