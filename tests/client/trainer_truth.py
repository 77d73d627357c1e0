"""What a trainer test expects, from the test's own clock: the instants it logged itself.

The same rule as the service (innermost open phase owns each instant; training since the
last durable snapshot before a failure is lost progress), applied to a handful of marks,
so a mismatch points at the callback, not at the arithmetic.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
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


# The example trainer's log (examples/train_elastic.py --truth): one fact per line.

COMPONENT = {  # docs/model.md section 2, the default taxonomy, for the phases the example reports
    "process_group_init": "initialization", "checkpoint_load": "initialization",
    "compilation": "compilation", "training": "effective_training",
    "checkpoint_save": "wasted_training", "final_checkpoint": "shutdown", "teardown": "shutdown",
}
COMPONENTS = ("scheduling", "initialization", "compilation", "effective_training",
              "wasted_training", "shutdown", "unattributed")
# At one instant: ends, then the failure, then starts (docs/model.md section 5, ties).
_TIE = {"end": 0, "failure": 1, "start": 2}


def expected_from_log(path: Path) -> dict[str, Any]:
    """The job's numbers from the trainer's own log: innermost open phase owns each instant
    (docs/model.md section 2); a failure closes whatever is open at its instant, so the
    held time after it that no later phase covers is unattributed (section 5); training
    since the last durable snapshot before a failure is lost progress (section 4).

    A worker stopped by SIGTERM dies inside its phases and logs no end for them: the
    failure instant is the only mark between them and the attempt's end.
    """
    facts = [json.loads(line) for line in path.read_text().splitlines()]
    attempts = sorted({f["attempt"] for f in facts})
    alloc = {k: next(f["t"] for f in facts if f["attempt"] == k and f["what"] == "allocated")
             for k in attempts}
    comps = dict.fromkeys(COMPONENTS, 0.0)
    held = lost = 0.0
    causes = []
    for k in attempts:
        mine = [f for f in facts if f["attempt"] == k]
        fail = next((f["t"] for f in mine if f["what"] == "failure"), None)
        released = next((f["t"] for f in mine if f["what"] == "released"), None)
        # Without a release, an attempt ends where the next one starts (model.md section 5).
        end = released if released is not None else alloc[k + 1]
        held += end - alloc[k]
        if fail is not None:
            causes.append("infra")
        marks = sorted(((f["t"], _TIE[f["what"]], i) for i, f in enumerate(mine)
                        if f["what"] in _TIE), key=lambda m: m[:2])
        bounds = sorted({alloc[k], end, *(t for t, _, _ in marks)})
        stack: list[str] = []
        owner_at = []  # (t0, t1, phase or None)
        pending = iter(marks)
        mark = next(pending, None)
        for t0, t1 in itertools.pairwise(bounds):
            while mark is not None and mark[0] <= t0:
                f = mine[mark[2]]
                if f["what"] == "start":
                    stack.append(f["phase"])
                elif f["what"] == "failure":
                    stack.clear()
                elif f["phase"] in stack:  # an end the failure already closed: no effect
                    del stack[len(stack) - 1 - stack[::-1].index(f["phase"])]
                mark = next(pending, None)
            owner_at.append((t0, t1, stack[-1] if stack else None))
        for t0, t1, phase in owner_at:
            comps[COMPONENT[phase] if phase else "unattributed"] += t1 - t0
        if fail is not None:
            snaps = [f["snapshot"] for f in mine if f["what"] == "checkpoint" and f["t"] <= fail]
            since = max(snaps) if snaps else alloc[k]
            lost += sum(t1 - max(t0, since) for t0, t1, p in owner_at
                        if p == "training" and t1 > since)
    comps["effective_training"] -= lost
    comps["wasted_training"] += lost
    return {"held": held, "components": comps, "lost": lost, "causes": causes,
            "attempts": len(attempts)}
