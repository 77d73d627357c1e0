"""What a trainer test expects, from the test's own clock: the instants it logged itself.

The same rule as the service (innermost open phase owns each instant; training since the
last durable snapshot before a failure is lost progress), applied to a handful of marks,
so a mismatch points at the callback, not at the arithmetic.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class AttemptTruth:
    start: float = 0.0
    first_batch: float = 0.0
    end: float = 0.0
    failure: float | None = None
    # (start, end) of each evaluation and each checkpoint save during training (where the
    # test can time them), and each checkpoint's snapshot.
    validations: list[tuple[float, float]] = field(default_factory=list)
    saves: list[tuple[float, float]] = field(default_factory=list)
    snapshots: list[float] = field(default_factory=list)

    def inside(self, a: float, b: float, spans: list[tuple[float, float]] | None = None
               ) -> float:
        """Seconds of `spans` (validations by default) within [a, b]."""
        spans = self.validations if spans is None else spans
        return sum(max(0.0, min(b, v1) - max(a, v0)) for v0, v1 in spans)


def expected(attempts: list[AttemptTruth]) -> dict[str, float]:
    held = init = train = val = saves = lost = 0.0
    nof = 0
    for a in attempts:
        held += a.end - a.start
        init += a.first_batch - a.start
        work_end = a.failure if a.failure is not None else a.end
        v, w = a.inside(a.first_batch, work_end), a.inside(a.first_batch, work_end, a.saves)
        val += v
        saves += w
        train += work_end - a.first_batch - v - w
        if a.failure is not None:
            nof += 1
            since = max([s for s in a.snapshots if s <= a.failure], default=a.first_batch)
            lost += (a.failure - since - a.inside(since, a.failure)
                     - a.inside(since, a.failure, a.saves))
    return {"held": held, "initialization": init, "training": train, "validation": val,
            "saves": saves, "lost": lost, "nof": nof}


def close_enough(got: float, want: float) -> bool:
    # The callbacks and the truth read the clock a few statements apart, and checkpoint
    # writes (milliseconds for these models) count as training in the truth.
    return abs(got - want) <= max(0.3, 0.03 * abs(want))


def check(result: dict[str, Any], want: dict[str, float]) -> None:
    both = f"service: {json.dumps(result, sort_keys=True)}\ntruth: {json.dumps(want)}"
    comps = result["components"]
    assert close_enough(result["held_seconds"], want["held"]), both
    assert close_enough(comps.get("initialization", 0.0), want["initialization"]), both
    # Compilation runs inside the first steps: the truth sees it as training.
    trained = comps.get("effective_training", 0.0) + comps.get("compilation", 0.0)
    assert close_enough(trained, want["training"] - want["lost"]), both
    assert close_enough(result["phases"].get("lost_progress", 0.0), want["lost"]), both
    assert close_enough(result["phases"].get("validation", 0.0), want["validation"]), both
    assert close_enough(comps.get("wasted_training", 0.0), want["saves"] + want["lost"]), both
    assert result["level1"]["nof"] == want["nof"], both
