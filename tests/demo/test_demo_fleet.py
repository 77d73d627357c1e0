"""The demo fleet's regressions, and lifting them mid-run as a fix rolling out would."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import islice

from service.demo.fleet import FleetSpec, Regression, fleet_events


def _compilation_s(events: list[tuple[float, dict]]) -> dict[str, float]:
    """Seconds of compilation per job."""
    opened: dict[str, float] = {}
    out: dict[str, float] = {}
    for t, ev in events:
        if ev.get("phase") != "compilation":
            continue
        if ev["type"] == "phase_start":
            opened[ev["job_id"]] = t
        elif ev["type"] == "phase_end":
            out[ev["job_id"]] = out.get(ev["job_id"], 0.0) + t - opened.pop(ev["job_id"])
    return out


def test_jobs_started_after_the_lift_run_without_the_regression() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    spec = FleetSpec(models=1, seed=3, regressions=(Regression.parse("compilation=50x"),),
                     failure_rate_per_hour=0.0)
    plain = FleetSpec(models=1, seed=3, failure_rate_per_hour=0.0)
    lifted = False
    stream = fleet_events(spec, start, lifted=lambda: lifted)
    first_jobs = []
    for t, ev in stream:
        first_jobs.append((t, ev))
        if ev["type"] == "released" and ev["job_id"].endswith("w00002"):
            break
    lifted = True  # the next job of the model is generated from here on
    later = list(islice(stream, 400))
    regressed, healthy = _compilation_s(first_jobs), _compilation_s(later)
    baseline = _compilation_s(list(islice(fleet_events(plain, start), 400)))
    assert [job[-6:] for job in sorted(regressed)] == ["w00001", "w00002"]
    assert healthy.keys().isdisjoint(regressed)
    assert min(regressed.values()) > 10 * max(baseline.values())
    assert healthy and max(healthy.values()) < 5 * max(baseline.values())
