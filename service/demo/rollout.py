"""The roll-out (`ett demo --scenario rollout`): a fleet whose ETT rises week by week.

Pure generation (no I/O). Six models (8 to 256 GPUs) each start one run a day; at the
start of week w (w = 1..5) the w-th change of `paired.CHANGES` lands fleet-wide and stays,
and an annotation marks it. `GET /v1/impact?around=<id>&days=7` then answers what each
change gained, and the dashboards show the markers where the ETT line steps up.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from .paired import CHANGES, run_events
from .paired import recipe as paired_recipe

MODELS = tuple((f"rollout_m{i + 1}_{8 * 2**i}g", 8 * 2**i) for i in range(6))
TITLES = {
    "compile_cache": "Compilation cache on (cold compiles ~2050 s -> ~250 s)",
    "async_checkpoints": "Asynchronous checkpoints (every 15 min, 8 s blocking)",
    "init_overlap": "Initialization overlap",
    "standalone_publish": "Standalone publishing (shutdown 25-55 min -> ~3 min)",
    "fast_recovery": "Faster recovery (hang detection, warm restart)",
}


@dataclass(frozen=True)
class Landing:
    change: str
    ts: datetime

    def annotation(self) -> dict[str, Any]:
        """The `POST /v1/annotations` body that marks this change."""
        return {"ts": self.ts.isoformat().replace("+00:00", "Z"), "title": TITLES[self.change],
                "tags": ["rollout", self.change], "models": ["rollout_*"]}


def landings(start: datetime) -> list[Landing]:
    return [Landing(change, start + timedelta(weeks=w + 1)) for w, change in enumerate(CHANGES)]


def rollout_events(start: datetime, weeks: int = 6) -> Iterator[list[dict[str, Any]]]:
    """One list of events per run, day by day; a run has the changes landed before it."""
    landed = landings(start)
    for day in range(weeks * 7):
        for i, (model, gpus) in enumerate(MODELS):
            begin = start + timedelta(days=day, hours=2 * i)
            changes = tuple(x.change for x in landed if x.ts <= begin)
            yield run_events(model, gpus, paired_recipe(i, changes), begin,
                             f"{model}.d{day:03d}", {"rollout_week": str(day // 7)})


def start_for(now: datetime, weeks: int = 6) -> datetime:
    """Where a posted roll-out starts: `weeks` back from today's midnight UTC (a rerun the
    same day posts the same event ids), so its last runs have ended by now."""
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    return midnight - timedelta(weeks=weeks)
