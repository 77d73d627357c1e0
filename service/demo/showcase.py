"""What `make run`'s demo posts beside the fleet, and the scenarios of `ett demo --scenario`.

The fleet alone leaves the showcase pages empty on first load: it has no labelled cohorts,
no annotated changes and, over two days, too few interruptions per model for checkpoint
advice. So the demo of `ett serve --demo` also posts the paired benchmark (a labelled
`variant=baseline` / `variant=optimized` cohort), the roll-out with its annotations, and
runs the fleet with more interruptions (`SHOWCASE_FAILURE_RATE`). The worked example of
docs/model.md section 6 is a scenario of its own, so anyone can check its figures.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from . import paired, rollout
from .poster import Poster, post_runs

# Interruptions per job-hour of training in `make run`'s fleet: about four per model in two
# days, where checkpoint advice needs three (docs/checkpoints.md) and the default 0.015
# gives most models none.
SHOWCASE_FAILURE_RATE = 0.1
WORKED_JOB = "worked-example"
WORKED_MODEL = "worked_example"
WORKED_TEAM = "docs"
_NS = uuid.UUID("0b7c4a52-93d1-4f0e-8a63-5e2d1c9f7a10")

Say = Callable[[str], None]
log = logging.getLogger("ett.demo")


def post_paired(poster: Poster, now: datetime, say: Say) -> None:
    start = paired.start_for(now)
    post_runs(poster, paired.paired_events(start), now)
    say(f"paired benchmark from {start.isoformat()}: compare with"
        " `ett impact --baseline-label variant:baseline"
        " --candidate-label variant:optimized --model 'paired_*'`")


def post_rollout(poster: Poster, now: datetime, say: Say) -> bool:
    """The roll-out's runs and one annotation per change; False when one was refused."""
    start = rollout.start_for(now)
    post_runs(poster, rollout.rollout_events(start), now)
    have = {(a["ts"], a["title"]) for a in _annotations(poster, start, now)}
    for landing in rollout.landings(start):
        body = landing.annotation()
        if (datetime.fromisoformat(body["ts"]).isoformat(), body["title"]) in have:
            continue  # posted by an earlier run: annotations have no idempotency key
        r = poster.client.post("/v1/annotations", json=body)
        if r.status_code != 201:
            say(f"annotation refused: {r.status_code} {r.text}")
            return False
        say(f"annotation {r.json()['id']}: {landing.ts.date()} {landing.change}")
    say("compare a change with `ett impact --around ID --days 7 --model 'rollout_*'`")
    return True


def _annotations(poster: Poster, start: datetime, now: datetime) -> list[dict[str, Any]]:
    r = poster.client.get("/v1/annotations", params={
        "start": start.isoformat().replace("+00:00", "Z"),
        "end": now.isoformat().replace("+00:00", "Z"), "tag": "rollout"})
    if r.status_code != 200:
        return []
    body = r.json()
    items = body.get("annotations", body) if isinstance(body, dict) else body
    return [{"ts": datetime.fromisoformat(a["ts"].replace("Z", "+00:00")).isoformat(),
             "title": a["title"]} for a in items]


def post_showcase(poster: Poster, now: datetime) -> None:
    """What `ett serve --demo` posts after the fleet's back-fill, logged."""
    def say(line: str) -> None:
        log.info("demo: %s", line)

    post_paired(poster, now, say)
    post_rollout(poster, now, say)


def worked_example_events(start: datetime) -> list[dict[str, Any]]:
    """docs/model.md section 6, minute by minute from `start` (ids fixed: a rerun is a no-op)."""
    def at(minutes: float) -> str:
        return (start + timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")

    def ev(kind: str, minutes: float, attempt: int = 0, **fields: Any) -> dict[str, Any]:
        key = f"{start.isoformat()}:{kind}:{minutes}:{attempt}:{sorted(fields.items())!r}"
        return {"event_id": str(uuid.uuid5(_NS, key)), "ts": at(minutes), "job_id": WORKED_JOB,
                "attempt": attempt, "model": WORKED_MODEL, "type": kind, **fields}

    def phase(name: str, a: float, b: float, attempt: int = 0) -> list[dict[str, Any]]:
        return [ev("phase_start", a, attempt, phase=name), ev("phase_end", b, attempt, phase=name)]

    return [
        ev("allocated", 0, gpus=8, team=WORKED_TEAM), *phase("scheduling", 0, 2),
        *phase("launcher_init", 2, 10), *phase("compilation", 10, 20),
        ev("phase_start", 20, phase="training"), *phase("checkpoint_save", 50, 51),
        ev("checkpoint", 52, attrs={"snapshot_ts": at(50), "step": 3000}),
        ev("failure", 80, attrs={"cause": "infra", "reason": "xid 79"}),
        ev("released", 82, attrs={"reason": "failed"}),
        ev("allocated", 85, 1, gpus=8), ev("phase_start", 85, 1, phase="launcher_init"),
        *phase("checkpoint_load", 90, 93, 1), ev("phase_end", 93, 1, phase="launcher_init"),
        *phase("compilation", 93, 98, 1), *phase("training", 98, 158, 1),
        *phase("final_checkpoint", 158, 160, 1), *phase("model_publish", 160, 163, 1),
        ev("released", 163, 1, attrs={"reason": "completed"}),
    ]


def worked_example_start(now: datetime) -> datetime:
    """Yesterday 09:00 UTC: a whole day back, so the job has ended and a rerun the same day
    posts the same events."""
    day = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day - timedelta(days=1) + timedelta(hours=9)


def post_worked_example(poster: Poster, now: datetime, say: Say) -> bool:
    """Post it, aggregate (an admin token may), and print the figures docs/model.md states."""
    start = worked_example_start(now)
    poster.post(worked_example_events(start))
    say(f"worked example (docs/model.md section 6) posted as job {WORKED_JOB!r}, model"
        f" {WORKED_MODEL!r}, team {WORKED_TEAM!r}, allocated {start.isoformat()}")
    r = poster.client.post("/v1/aggregate", timeout=600)
    if r.status_code != 200:
        say("not aggregated yet (this token may not run a pass): the aggregator picks it up"
            f" within its interval; then `ett report --job {WORKED_JOB}`")
        return True
    job = poster.client.get(f"/v1/jobs/{WORKED_JOB}").json()
    comps = job.get("components", {})
    minutes = ", ".join(f"{name} {float(v) / 60:g}" for name, v in comps.items()
                        if isinstance(v, int | float))
    say(f"ETT {job['ett_ratio']} ({100 * job['ett_ratio']:.2f} %), held"
        f" {job['held_seconds'] / 60:g} min; components (min): {minutes}")
    say(f"the job's page: /ui/jobs/{WORKED_JOB}; `ett report --job {WORKED_JOB}`")
    return True
