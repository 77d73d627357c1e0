"""What tests across rooms share: wire events, posting them, clocks (fixed, or moved by hand),
the derived tables read or wiped."""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text

from service.demo.fleet import FleetSpec, fleet_events
from service.store.tables import MODEL_FIGURES

BASE = datetime(2026, 11, 1, tzinfo=UTC)


def ts(minutes: float, base: datetime = BASE) -> str:
    return (base + timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")


def event(type_: str, minutes: float, *, job_id: str = "job-1", attempt: int = 0,
          model: str = "model-a", base: datetime = BASE, **fields: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "event_id": str(uuid.uuid4()),
        "ts": ts(minutes, base),
        "job_id": job_id,
        "attempt": attempt,
        "model": model,
        "type": type_,
    }
    ev.update(fields)
    return ev


def spec_example(job_id: str = "job-1", model: str = "model-a",
                 base: datetime = BASE) -> list[dict[str, Any]]:
    """docs/model.md section 6: the 8-GPU job with one infra failure (ETT 56.25%)."""
    e = lambda t, m, **kw: event(t, m, job_id=job_id, model=model, base=base, **kw)  # noqa: E731
    return [
        e("allocated", 0, gpus=8, team="ads"),
        e("phase_start", 0, phase="scheduling"), e("phase_end", 2, phase="scheduling"),
        e("phase_start", 2, phase="launcher_init"), e("phase_end", 10, phase="launcher_init"),
        e("phase_start", 10, phase="compilation"), e("phase_end", 20, phase="compilation"),
        e("phase_start", 20, phase="training"),
        e("phase_start", 50, phase="checkpoint_save"), e("phase_end", 51, phase="checkpoint_save"),
        e("checkpoint", 52, attrs={"snapshot_ts": ts(50, base), "step": 3000}),
        e("failure", 80, attrs={"cause": "infra", "reason": "xid 79"}),
        e("released", 82, attrs={"reason": "failed"}),
        e("allocated", 85, attempt=1, gpus=8),
        e("phase_start", 85, attempt=1, phase="launcher_init"),
        e("phase_start", 90, attempt=1, phase="checkpoint_load"),
        e("phase_end", 93, attempt=1, phase="checkpoint_load"),
        e("phase_end", 93, attempt=1, phase="launcher_init"),
        e("phase_start", 93, attempt=1, phase="compilation"),
        e("phase_end", 98, attempt=1, phase="compilation"),
        e("phase_start", 98, attempt=1, phase="training"),
        e("phase_end", 158, attempt=1, phase="training"),
        e("phase_start", 158, attempt=1, phase="final_checkpoint"),
        e("phase_end", 160, attempt=1, phase="final_checkpoint"),
        e("phase_start", 160, attempt=1, phase="model_publish"),
        e("phase_end", 163, attempt=1, phase="model_publish"),
        e("released", 163, attempt=1, attrs={"reason": "completed"}),
    ]


def interrupted_job(job_id: str, model: str, base_min: float) -> list[dict]:
    """Two attempts, worked by hand (minutes from base_min):
    attempt 0: train 0-60 with saves 10-11, 21-22 and 32-33 (durable at their ends, the
    snapshot at their starts); fails at 40, released 42. Lost: training 33-40 = 7.
    attempt 1: allocated 45, launcher_init 45-48, trains 48-58, completes at 58.
    Held 42 + 13 = 55; blocking saves 3; intervals 11-21 = 10 and 22-32 = 10;
    TTR = 7 lost + 2 after F + 3 startup = 12, so R = 12 - 7 = 5."""
    def e(kind, m, attempt=0, **kw):
        return event(kind, base_min + m, job_id=job_id, model=model, attempt=attempt, **kw)
    evs = [e("allocated", 0, gpus=4, team="ckpt"), e("phase_start", 0, phase="training")]
    for s in (10, 21, 32):
        evs += [e("phase_start", s, phase="checkpoint_save"),
                e("phase_end", s + 1, phase="checkpoint_save"), e("checkpoint", s + 1)]
    evs += [e("failure", 40, attrs={"cause": "infra"}), e("released", 42,
                                                          attrs={"reason": "failed"}),
            e("allocated", 45, 1, gpus=4), e("phase_start", 45, 1, phase="launcher_init"),
            e("phase_end", 48, 1, phase="launcher_init"), e("phase_start", 48, 1, phase="training"),
            e("phase_end", 58, 1, phase="training"),
            e("released", 58, 1, attrs={"reason": "completed"})]
    return evs


class FakeClock:
    """A monotonic clock (seconds) that moves only when a test moves it: `clock.now += 0.5`."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


NOW = datetime(2026, 11, 20, tzinfo=UTC)  # long after every event in these tests


def fixed(now: datetime = NOW):
    return lambda: now


def results_state(engine) -> dict[str, list]:
    """Every derived table, in a comparable form (computed_at is when, not what)."""
    queries = {
        "jobs": "SELECT job_id, model, team, state, first_at, last_at, open, held_gpu_seconds,"
                " effective_gpu_seconds, at_risk_gpu_seconds, nof, tts_seconds, ttr_seconds,"
                " ttr_causes, result FROM jobs ORDER BY job_id",
        "attempts": "SELECT * FROM attempts ORDER BY job_id, attempt",
        "segments": "SELECT * FROM segments ORDER BY job_id, seq",
        "rollup": "SELECT * FROM rollup_hourly ORDER BY job_id, hour, component, phase, owner",
        "fleet": "SELECT * FROM fleet_hourly WHERE settled_gpu_us <> 0 OR unsettled_gpu_us <> 0"
                 " ORDER BY hour, model, team, component, phase, owner",
        "daily": "SELECT * FROM fleet_daily WHERE settled_gpu_us <> 0 OR unsettled_gpu_us <> 0"
                 " ORDER BY day, model, team, component, phase, owner",
        "weekly": "SELECT * FROM fleet_weekly WHERE settled_gpu_us <> 0 OR unsettled_gpu_us <> 0"
                  " ORDER BY week, model, team, component, phase, owner",
        **{t: f"SELECT * FROM {t} WHERE settled_gpu_us <> 0 OR unsettled_gpu_us <> 0"
              f" ORDER BY 1, 2, 3, 4, 5" for t in ("team_hourly", "team_daily")},
        **{t: f"SELECT * FROM {t} WHERE greatest({', '.join(MODEL_FIGURES)}) <> 0"
              f" ORDER BY 1, 2, 3" for t in ("model_hourly", "model_daily", "model_weekly")},
        "totals": "SELECT * FROM settled_totals WHERE settled_gpu_us <> 0"
                  " ORDER BY model, team, component, owner",
        "impact": "SELECT * FROM job_impact ORDER BY job_id",
        "checkpoints": "SELECT * FROM checkpoint_attempts ORDER BY job_id, attempt",
    }
    with engine.connect() as conn:
        return {k: [tuple(r) for r in conn.execute(text(q))] for k, q in queries.items()}


def wipe_results(engine) -> None:
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE jobs, attempts, segments, rollup_hourly, fleet_hourly,"
                          " fleet_daily, fleet_weekly, team_hourly, team_daily, model_hourly,"
                          " model_daily, model_weekly, settled_totals, team_pending"))


def demo_events(models: int = 6, hours: float = 30, seed: int = 3) -> list[dict]:
    """A few days of the simulated fleet, ending long before NOW."""
    start = BASE
    cut = (start + timedelta(hours=hours)).timestamp()
    spec = FleetSpec(models=models, seed=seed)
    return [ev for t, ev in itertools.takewhile(lambda x: x[0] < cut, fleet_events(spec, start))]


def post_all(api, events: list[dict], size: int = 1000) -> None:
    for i in range(0, len(events), size):
        r = api.post("/v1/events", json={"events": events[i:i + size]})
        assert r.status_code == 202 and not r.json()["rejected"], r.text


def labelled(events: list[dict], **labels: str) -> list[dict]:
    for e in events:
        if e["type"] == "allocated":
            e["attrs"] = {"labels": labels}
    return events


def faster_recovery(job_id: str, hours_later: int = 0) -> list[dict]:
    """The worked example with the restart's compilation cut from 5 to 1 minute (93-94);
    training then runs 94-158, so effective = 30 + 64 = 94 min of 160 held."""
    out = []
    base = BASE + timedelta(hours=hours_later)
    for e in spec_example(job_id, base=base):
        if e.get("attempt") == 1 and e.get("phase") in ("compilation", "training") and (
                e["ts"] == ts(98, base)):
            e["ts"] = ts(94, base)
        out.append(e)
    return out


# Four weeks and a half, Tuesday 2026-10-20 to Sunday 2026-11-22 (UTC), one worked-example
# job every 31 hours at a different minute of the hour (two models), so jobs cross
# midnights and the Monday boundaries.
WEEKS_FIRST = datetime(2026, 10, 20, 5, 17, tzinfo=UTC)
WEEKS_JOBS = [(f"w-{i}", f"model-{i % 2}", WEEKS_FIRST + timedelta(hours=31 * i, minutes=7 * i))
              for i in range(22)]


def revise_weeks_jobs(api, checkpoint_minute: int) -> None:
    """Revisions of WEEKS_JOBS after a pass: a late checkpoint taken at `checkpoint_minute`
    of the fourth job (at the failure, it moves all the lost progress back to training),
    and a third attempt of the sixth job a week later (rows in another week)."""
    job_id, model, base = WEEKS_JOBS[3]
    snapshot = (base + timedelta(minutes=checkpoint_minute)).isoformat()
    post_all(api, [event("checkpoint", checkpoint_minute, job_id=job_id, model=model,
                         base=base, attrs={"snapshot_ts": snapshot})])
    job_id, model, base = WEEKS_JOBS[5]
    post_all(api, [event("allocated", 7 * 1440, job_id=job_id, model=model, base=base,
                         attempt=2, gpus=8),
                   event("released", 7 * 1440 + 45, job_id=job_id, model=model, base=base,
                         attempt=2, attrs={"reason": "completed"})])
