"""The slow integration test's oracle (`trainer_truth.expected_from_log`) against the rule
the service applies, on trainer logs written here, without torch or a service.

The example trainer's first attempt ends in one of two ways, depending on a race: gloo
notices the dead peer first (the `training` block exits and logs its end, then the failure
is logged), or torchelastic's SIGTERM arrives first (the failure is logged by the signal
handler and the process dies inside `training`, which never logs an end). Both must be
measured alike: the failure ends the attempt's work, and the held time from it to the
restart is unattributed, not training.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ett_client.clock import format_rfc3339_us
from hypothesis import given, settings
from hypothesis import strategies as st

from ett_core import Event, Taxonomy, compute_job
from tests.client.trainer_truth import COMPONENTS, expected_from_log

BASE_S = 1_800_000_000.0
US = 1_000_000


def write_log(path: Path, facts: list[tuple[float, int, str, dict[str, Any]]]) -> Path:
    """Facts as (seconds after BASE_S, attempt, what, extra fields), in the order logged."""
    with path.open("w") as out:
        for t, attempt, what, extra in facts:
            out.write(json.dumps({"t": BASE_S + t, "what": what, "attempt": attempt, **extra})
                      + "\n")
    return path


def start(t: float, phase: str, attempt: int = 0) -> tuple[float, int, str, dict[str, Any]]:
    return (t, attempt, "start", {"phase": phase})


def end(t: float, phase: str, attempt: int = 0) -> tuple[float, int, str, dict[str, Any]]:
    return (t, attempt, "end", {"phase": phase})


def fact(t: float, what: str, attempt: int = 0, **extra: Any
         ) -> tuple[float, int, str, dict[str, Any]]:
    return (t, attempt, what, extra)


# Attempt 0 trains from 3 s, saves 6-7 s (snapshot 6 s, durable 8 s) and fails at 10 s;
# torchelastic restarts it at 20 s; attempt 1 resumes, trains 23-30 s and completes at 31.5 s.
BEFORE_FAILURE = [
    fact(0, "allocated"), start(0, "process_group_init"), end(1, "process_group_init"),
    start(3, "training"), start(3.5, "compilation"), end(5, "compilation"),
    start(6, "checkpoint_save"), end(7, "checkpoint_save"),
    fact(8, "checkpoint", snapshot=BASE_S + 6),
]
RESTART = [
    fact(20, "allocated", 1), start(20, "process_group_init", 1),
    end(21, "process_group_init", 1), start(21, "checkpoint_load", 1),
    end(22, "checkpoint_load", 1), start(23, "training", 1), start(23, "compilation", 1),
    end(24, "compilation", 1), end(30, "training", 1), start(30, "final_checkpoint", 1),
    end(31, "final_checkpoint", 1), start(31, "teardown", 1), end(31.5, "teardown", 1),
    fact(31.5, "released", 1),
]
ENDINGS = {
    # SIGTERM first: the handler logs the failure and the process dies inside `training`.
    "sigterm": [fact(10, "failure", via="SIGTERM")],
    # gloo first: leaving the `with` block logs the end, then the except clause the failure.
    "collective": [end(10, "training"), fact(10, "failure", via="collective")],
    # A SIGTERM whose handler returns: the unwinding logs the end after the failure.
    "unwound": [fact(10, "failure", via="SIGTERM"), end(10.2, "training")],
}


@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_a_failed_attempt_is_measured_alike_however_its_trainer_died(tmp_path: Path,
                                                                     ending: str) -> None:
    log = write_log(tmp_path / "truth.jsonl", BEFORE_FAILURE + ENDINGS[ending] + RESTART)
    got = expected_from_log(log)
    # By hand. Training owns 3-3.5, 5-6, 7-10 (attempt 0) and 24-30 (attempt 1): 10.5 s, of
    # which 7-10 (after the durable snapshot at 6, up to the failure) is lost progress.
    want = {
        "scheduling": 0.0,
        "initialization": 1 + 1 + 1,  # 0-1, 20-21, 21-22
        "compilation": 1.5 + 1,  # 3.5-5, 23-24
        "effective_training": 0.5 + 1 + 6,  # 3-3.5, 5-6, 24-30
        "wasted_training": 1 + 3,  # the save 6-7, lost progress 7-10
        "shutdown": 1 + 0.5,  # 30-31, 31-31.5
        "unattributed": 2 + 10 + 1,  # 1-3, the failure to the restart 10-20, 22-23
    }
    assert got["held"] == pytest.approx(31.5)
    assert got["components"] == pytest.approx(want)
    assert got["lost"] == pytest.approx(3)
    assert got["causes"] == ["infra"]
    assert got["attempts"] == 2


# -- the oracle is the service's rule: compared with ett_core on generated trainer logs --

Fact = tuple[int, int, str, dict[str, Any]]  # (microseconds after BASE_S, attempt, what, extra)
gap = st.integers(min_value=1, max_value=3 * US)


def _phase(draw: st.DrawFn, scope: list[Fact], now: int, attempt: int, name: str) -> int:
    """Log a phase a drawn gap after ``now``, lasting a drawn time; returns its end."""
    now += draw(gap)
    scope.append((now, attempt, "start", {"phase": name}))
    now += draw(gap)
    scope.append((now, attempt, "end", {"phase": name}))
    return now


@st.composite
def trainer_runs(draw: st.DrawFn) -> list[Fact]:
    """What the example trainer logs over 1-3 attempts: all but the last fail (at a drawn
    instant, by a drawn ending), the last completes."""
    facts: list[Fact] = []
    now = 0
    attempts = draw(st.integers(min_value=1, max_value=3))
    for k in range(attempts):
        now += draw(gap)
        facts.append((now, k, "allocated", {}))
        scope: list[Fact] = []  # this attempt's start/end marks, as if it ran to completion
        now = _phase(draw, scope, now, k, "process_group_init")
        if k > 0:
            now = _phase(draw, scope, now, k, "checkpoint_load")
        now += draw(gap)
        scope.append((now, k, "start", {"phase": "training"}))
        durable: list[Fact] = []
        for inner in draw(st.lists(st.sampled_from(["compilation", "checkpoint_save"]),
                                   max_size=5)):
            now = _phase(draw, scope, now, k, inner)
            if inner == "checkpoint_save":  # async: durable some time after the staging
                staged = (BASE_S * US + scope[-2][0]) / US
                durable.append((now + draw(gap), k, "checkpoint", {"snapshot": staged}))
        now += draw(gap)
        scope.append((now, k, "end", {"phase": "training"}))
        if k == attempts - 1:
            now = _phase(draw, scope, now, k, "final_checkpoint")
            now = _phase(draw, scope, now, k, "teardown")
            facts += scope + durable + [(now, k, "released", {})]
            break
        fail = draw(st.integers(min_value=scope[0][0], max_value=now))
        before = [f for f in scope if f[0] < fail]
        still_open: list[str] = []
        for _, _, what, extra in before:
            if what == "start":
                still_open.append(extra["phase"])
            else:  # well nested: the end closes the innermost
                assert still_open.pop() == extra["phase"]
        closing = [(fail, k, "end", {"phase": p}) for p in reversed(still_open)]
        failure: list[Fact] = [(fail, k, "failure", {})]
        ending = draw(st.sampled_from(sorted(ENDINGS)))
        if ending == "collective":
            tail = closing + failure
        elif ending == "unwound":
            tail = failure + [(t + draw(gap), k, w, e) for t, _, w, e in closing]
        else:
            tail = failure
        facts += before + tail + [f for f in durable if f[0] <= fail]
        now = max(f[0] for f in facts)
    return facts


def engine_events(facts: list[Fact]) -> list[Event]:
    kinds = {"allocated": "allocated", "start": "phase_start", "end": "phase_end",
             "failure": "failure", "checkpoint": "checkpoint", "released": "released"}
    events = []
    for i, (t, k, what, extra) in enumerate(facts):
        attrs: dict[str, Any] = {}
        if what == "failure":
            attrs["cause"] = "infra"
        elif what == "released":
            attrs["reason"] = "completed"
        elif what == "checkpoint":
            attrs["snapshot_ts"] = format_rfc3339_us(round(extra["snapshot"] * US))
        events.append(Event(
            event_id=f"e{i:04d}", ts_us=round(BASE_S * US) + t, job_id="job", attempt=k,
            model="tiny-mlp", type=kinds[what], phase=extra.get("phase"),
            gpus=2 if what == "allocated" else None, attrs=attrs))
    return events


@settings(max_examples=150, deadline=None)
@given(trainer_runs())
def test_the_oracle_measures_a_trainer_log_like_the_engine(tmp_path_factory: Any,
                                                           facts: list[Fact]) -> None:
    log = tmp_path_factory.mktemp("truth") / "truth.jsonl"
    write_log(log, [(t / US, k, what, extra) for t, k, what, extra in facts])
    oracle = expected_from_log(log)
    last = max(t for t, *_ in facts)
    result = compute_job(engine_events(facts), taxonomy=Taxonomy.default(),
                         now_us=round(BASE_S * US) + last + 1,
                         heartbeat_timeout_us=3600 * US).result
    for name in COMPONENTS:
        assert oracle["components"][name] == pytest.approx(
            result.components.get(name, 0) / US, abs=2e-5), name
    assert oracle["held"] == pytest.approx(result.held_us / US, abs=2e-5)
    assert oracle["lost"] == pytest.approx(result.phases.get("lost_progress", 0) / US, abs=2e-5)
