"""The figures /metrics exports, read from the database once per aggregation pass: the
settled totals, running jobs, failures, Level-1 histograms, stalls, the scheduler's word
and the ETT ratios of the last hour, day and week per model, team and fleet.

Scrapes never query the database: the aggregator builds a snapshot after each pass and
the collector (`service/metrics/`) renders the latest one.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import Connection

from ett_core.instants import us_to_seconds
from ett_core.taxonomy import CAUSES, STALLED
from service.store import queries as q

RATIO_WINDOWS = {"1h": timedelta(hours=1), "1d": timedelta(days=1), "7d": timedelta(days=7)}
# Seconds. Start-up and recovery span minutes to hours on real fleets.
LEVEL1_BUCKETS = (60.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 43200.0)

Key = tuple[str, ...]


@dataclass
class Snapshot:
    taken_at: datetime
    settled_gpu_seconds: dict[Key, float] = field(default_factory=dict)  # model,team,comp,owner
    at_risk_gpu_seconds: dict[Key, float] = field(default_factory=dict)  # model, team
    jobs_running: dict[Key, int] = field(default_factory=dict)  # model, team
    failures: dict[Key, int] = field(default_factory=dict)  # model, team, cause
    unknown_phase_events: dict[Key, int] = field(default_factory=dict)  # model
    # window -> level -> labels -> (effective, held) GPU-us
    ratios: dict[str, dict[str, dict[Key, tuple[int, int]]]] = field(default_factory=dict)
    tts_buckets: dict[Key, list[int]] = field(default_factory=dict)  # team -> counts per le
    tts_sum: dict[Key, float] = field(default_factory=dict)
    ttr_buckets: dict[Key, list[int]] = field(default_factory=dict)  # team, cause
    ttr_sum: dict[Key, float] = field(default_factory=dict)
    # Stalls: running jobs stalled now, and settled stalled GPU-seconds (model, team).
    stalled_jobs: dict[Key, int] = field(default_factory=dict)
    stalled_gpu_seconds: dict[Key, float] = field(default_factory=dict)
    # Per team, how many models' series were summed into model="other" (metrics/folding.py).
    folded_models: dict[str, int] = field(default_factory=dict)
    # The scheduler's word (model, team): queue seconds, uninstrumented held GPU-seconds,
    # and running jobs whose trainer has been silent past the heartbeat timeout.
    queue_seconds: dict[Key, float] = field(default_factory=dict)
    uninstrumented_gpu_seconds: dict[Key, float] = field(default_factory=dict)
    telemetry_silent_jobs: dict[Key, int] = field(default_factory=dict)
    # How many teams' series were summed into team="other" (metrics/folding.py).
    folded_teams: int = 0


# The figures keyed by (model, team, ...): what folding a model or a team into "other" sums.
MODEL_KEYED_FIELDS = ("settled_gpu_seconds", "at_risk_gpu_seconds", "jobs_running", "failures",
                      "stalled_jobs", "stalled_gpu_seconds", "queue_seconds",
                      "uninstrumented_gpu_seconds", "telemetry_silent_jobs")


def _observe(buckets: dict[Key, list[int]], sums: dict[Key, float], key: Key,
             value: float) -> None:
    counts = buckets.setdefault(key, [0] * (len(LEVEL1_BUCKETS) + 1))
    for i, bound in enumerate(LEVEL1_BUCKETS):
        if value <= bound:
            counts[i] += 1
    counts[-1] += 1  # +Inf
    sums[key] = sums.get(key, 0.0) + value


def _zero(buckets: dict[Key, list[int]], sums: dict[Key, float], key: Key) -> None:
    buckets.setdefault(key, [0] * (len(LEVEL1_BUCKETS) + 1))
    sums.setdefault(key, 0.0)


def first_seen(conn: Connection) -> list[tuple[str, str, datetime]]:
    """When each (model, team) was first seen (its earliest job): the order models keep
    their own series in (metrics/folding.py)."""
    return q.first_seen(conn)


def build_snapshot(conn: Connection, now: datetime, silent_after_s: float) -> Snapshot:
    snap = Snapshot(taken_at=now)
    for model, team, queue_s, uninstrumented in q.scheduler_totals(conn):
        snap.queue_seconds[(model, team)] = queue_s
        snap.uninstrumented_gpu_seconds[(model, team)] = uninstrumented
    for model, team, silent in q.silent_jobs(conn, now - timedelta(seconds=silent_after_s)):
        snap.telemetry_silent_jobs[(model, team)] = silent
    for model, team, component, owner, gpu_us in q.settled_totals(conn):
        snap.settled_gpu_seconds[(model, team, component, owner)] = us_to_seconds(gpu_us)
    for model, team, running, at_risk, unknown in q.job_counts(conn):
        snap.jobs_running[(model, team)] = running
        snap.at_risk_gpu_seconds[(model, team)] = at_risk
        key = (model,)
        snap.unknown_phase_events[key] = snap.unknown_phase_events.get(key, 0) + int(unknown)
    for model, team, cause, n in q.failure_counts(conn):
        snap.failures[(model, team, cause)] = n
    for team, tts, ttrs, causes in q.level1_times(conn):
        if tts is not None:
            _observe(snap.tts_buckets, snap.tts_sum, (team,), tts)
        for ttr, cause in zip(ttrs, causes, strict=False):
            _observe(snap.ttr_buckets, snap.ttr_sum, (team, cause), ttr)
    # A team with no start or no recovery yet exports zero counts, not nothing: absent
    # series mean a broken exporter and page the telemetry team.
    for _model, team in snap.jobs_running:
        _zero(snap.tts_buckets, snap.tts_sum, (team,))
        for cause in CAUSES:
            _zero(snap.ttr_buckets, snap.ttr_sum, (team, cause))
    # Every (model, team) with a running job has a stalled count, 0 when none is stalled.
    snap.stalled_jobs = {key: 0 for key in snap.jobs_running} | q.stalled_jobs(conn)
    stalled = q.stalled_gpu_us(conn, STALLED)
    snap.stalled_gpu_seconds = {k: us_to_seconds(v) for k, v in stalled.items()}
    for name, width in RATIO_WINDOWS.items():
        rows = q.window_figures(conn, now - width, now, ["model", "team"])
        levels: dict[str, dict[Key, list[int]]] = {
            "model": defaultdict(lambda: [0, 0]),
            "team": defaultdict(lambda: [0, 0]),
            "fleet": defaultdict(lambda: [0, 0]),
        }
        for row in rows:
            gpu_us = sum(row["components"].values())
            eff = row["components"]["effective_training"]
            for level, key in (("model", (row["model"], row["team"])), ("team", (row["team"],)),
                               ("fleet", ())):
                levels[level][key][0] += eff
                levels[level][key][1] += gpu_us
        snap.ratios[name] = {lvl: {k: (v[0], v[1]) for k, v in d.items()}
                             for lvl, d in levels.items()}
    return snap
