"""Prometheus export of the aggregator's results: a custom collector over the latest
snapshot, on the process's own registry (never the global one).

Counters never go backwards. Settled time can still be revised by a late event (an old
attempt's checkpoint arriving after export, say); the database and the API take the
revision, the exported counter keeps its value and the revision is counted in
`ett_settled_revisions_gpu_seconds_total`. High-water marks are persisted so a restart
continues the counters instead of resetting them, and only one aggregator process (the
holder of an advisory lock) exports database-derived metrics, so several replicas never
double-count in `sum()`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from sqlalchemy import Engine

from ett_core.instants import us_to_seconds
from service.aggregate import Aggregator, PassReport
from service.results.snapshot import (
    LEVEL1_BUCKETS,
    RATIO_WINDOWS,
    Key,
    Snapshot,
    build_snapshot,
    first_seen,
)
from service.settings import default
from service.store import state

from .exposition import Families
from .folding import fold_models, fold_teams, kept_models, kept_teams

log = logging.getLogger(__name__)

STATE_KEY = "exported_counters"


class MonotonicCounters:
    """Turns database totals (which a late event may revise down) into counters."""

    def __init__(self, restored: dict[Key, float] | None = None,
                 revised: dict[Key, float] | None = None) -> None:
        self.exported: dict[Key, float] = dict(restored or {})
        self._seen: dict[Key, float] = {}
        self.revised: dict[Key, float] = dict(revised or {})

    def update(self, current: dict[Key, float], revision_key: int | None = None) -> None:
        for key in set(current) | set(self._seen):
            value = current.get(key, 0.0)
            if key not in self._seen:
                self.exported[key] = max(self.exported.get(key, 0.0), value)
            else:
                delta = value - self._seen[key]
                if delta >= 0:
                    self.exported[key] = self.exported.get(key, 0.0) + delta
                elif revision_key is not None:
                    rk = key[: revision_key]
                    self.revised[rk] = self.revised.get(rk, 0.0) - delta
            self._seen[key] = value


def _encode(counters: dict[Key, float]) -> list[list[object]]:
    return [[*k, v] for k, v in sorted(counters.items())]


def _decode(rows: Iterable[list[object]]) -> dict[Key, float]:
    return {tuple(str(x) for x in row[:-1]): float(row[-1]) for row in rows}  # type: ignore[arg-type]


class AggregatorCollector(Collector):
    def __init__(self, engine: Engine, aggregator: Aggregator,
                 max_models_per_team: int = default("metrics_max_models_per_team"),
                 max_teams: int = default("metrics_max_teams")) -> None:
        self.engine = engine
        self.max_models_per_team = max_models_per_team
        self.max_teams = max_teams
        self.aggregator = aggregator
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._leader_conn = None
        self.is_leader = False
        self.settled = MonotonicCounters()
        self.failures = MonotonicCounters()
        self.histograms = MonotonicCounters()
        self.unknown = MonotonicCounters()
        self.stalled = MonotonicCounters()
        self.scheduler = MonotonicCounters()  # ("queue"|"uninstrumented", model, team)
        self._restored = False
        # Bumped whenever what the families show changes; `rendered()` keeps their text
        # for one (generation, leadership, last pass).
        self._generation = 0
        self._text: tuple[tuple[object, ...], bytes] | None = None

    # -- refresh (called by the aggregator after each pass) --------------------------------

    def _ensure_leader(self) -> bool:
        if self._leader_conn is None:
            self._leader_conn = self.engine.connect()
        try:
            got = self.is_leader or state.take_session_lock(self._leader_conn,
                                                            state.EXPORT_LEADER_LOCK)
            self._leader_conn.commit()
        except Exception:
            self._leader_conn = None
            self.is_leader = False
            raise
        self.is_leader = bool(got)
        return self.is_leader

    def close(self) -> None:
        """Give up leadership: unlock before the connection goes back to the pool."""
        if self._leader_conn is not None:
            try:
                state.release_session_lock(self._leader_conn, state.EXPORT_LEADER_LOCK)
                self._leader_conn.commit()
                self._leader_conn.close()
            except Exception:
                self._leader_conn.invalidate()  # dropping the session releases it too
            self._leader_conn = None
        self.is_leader = False
        with self._lock:
            self._generation += 1

    def _restore(self) -> None:
        with self.engine.connect() as conn:
            value = state.read_state(conn, STATE_KEY)
        if value is not None:
            self.settled = MonotonicCounters(_decode(value.get("settled", [])),
                                             _decode(value.get("revisions", [])))
            self.failures = MonotonicCounters(_decode(value.get("failures", [])))
            self.histograms = MonotonicCounters(_decode(value.get("histograms", [])))
            self.stalled = MonotonicCounters(_decode(value.get("stalled", [])))
            self.scheduler = MonotonicCounters(_decode(value.get("scheduler", [])))
        self._restored = True

    def _persist(self) -> None:
        value = {
            "settled": _encode(self.settled.exported),
            "revisions": _encode(self.settled.revised),
            "failures": _encode(self.failures.exported),
            "histograms": _encode(self.histograms.exported),
            "stalled": _encode(self.stalled.exported),
            "scheduler": _encode(self.scheduler.exported),
        }
        with self.engine.begin() as conn:
            state.write_state(conn, STATE_KEY, value)

    def refresh(self, now: datetime | None = None) -> None:
        if not self._ensure_leader():
            with self._lock:
                self._snapshot = None
                self._generation += 1
            return
        if not self._restored:
            self._restore()
        with self.engine.connect() as conn:
            snap = build_snapshot(conn, now or datetime.now(UTC),
                                  us_to_seconds(self.aggregator.heartbeat_timeout_us))
            order = first_seen(conn)
        teams = kept_teams(order, {k[1] for k in snap.settled_gpu_seconds}
                           | {k[1] for k in snap.jobs_running}, self.max_teams)
        fold_teams(snap, teams)
        fold_models(snap, kept_models([o for o in order if o[1] in teams],
                                      {k[:2] for k in snap.settled_gpu_seconds}
                                      | set(snap.jobs_running), self.max_models_per_team))
        with self._lock:
            self.settled.update(snap.settled_gpu_seconds, revision_key=1)
            self.failures.update({k: float(v) for k, v in snap.failures.items()})
            self.unknown.update({k: float(v) for k, v in snap.unknown_phase_events.items()})
            self.stalled.update(snap.stalled_gpu_seconds)
            flat: dict[Key, float] = {}
            for (team,), counts in snap.tts_buckets.items():
                for i, c in enumerate(counts):
                    flat[("tts", team, "", str(i))] = float(c)
                flat[("tts", team, "", "sum")] = snap.tts_sum[(team,)]
            for (team, cause), counts in snap.ttr_buckets.items():
                for i, c in enumerate(counts):
                    flat[("ttr", team, cause, str(i))] = float(c)
                flat[("ttr", team, cause, "sum")] = snap.ttr_sum[(team, cause)]
            self.histograms.update(flat)
            self.scheduler.update(
                {("queue", *k): v for k, v in snap.queue_seconds.items()}
                | {("uninstrumented", *k): v for k, v in snap.uninstrumented_gpu_seconds.items()})
            self._snapshot = snap
            self._generation += 1
        self._persist()

    # -- collection (scrapes) ----------------------------------------------------------------

    def describe(self) -> Iterator[Metric]:
        yield from self._families(None)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            yield from self._families(self._snapshot)

    def rendered(self) -> bytes:
        """`collect()` as exposition text, rendered again only when it changed: after a
        refresh, a change of leadership or a new pass (its time, lag and quarantine)."""
        agg = self.aggregator
        with self._lock:
            key = (self._generation, self.is_leader, agg.last_success_at, agg.last_report)
            if self._text is None or self._text[0] != key:
                snap = self._snapshot
                self._text = (key, generate_latest(Families(lambda: self._families(snap))))
            return self._text[1]

    def _families(self, snap: Snapshot | None) -> Iterator[Metric]:
        agg = self.aggregator
        last = GaugeMetricFamily(
            "ett_aggregation_last_success_timestamp_seconds",
            "Unix time at which the last aggregation pass of this process finished.",
        )
        lag = GaugeMetricFamily(
            "ett_aggregation_lag_seconds",
            "Age of the oldest unprocessed event batch when the last pass started.",
        )
        leader = GaugeMetricFamily(
            "ett_metrics_leader",
            "1 if this process exports the database-derived metrics (one process does).",
        )
        quarantined = GaugeMetricFamily(
            "ett_aggregation_quarantined_jobs",
            "Jobs whose computation or storage failed, held out of passes until their events"
            " change (GET /v1/admin/quarantine lists them).",
        )
        if agg.last_success_at is not None:
            last.add_metric([], agg.last_success_at.timestamp())
        if agg.last_report is not None:
            lag.add_metric([], agg.last_report.lag_seconds)
            quarantined.add_metric([], agg.last_report.jobs_quarantined)
        leader.add_metric([], 1.0 if self.is_leader else 0.0)
        folded = GaugeMetricFamily(
            "ett_metrics_folded_models",
            "Models whose series are summed into model=\"other\" (beyond the per-team bound).",
            labels=["team"],
        )
        folded_teams = GaugeMetricFamily(
            "ett_metrics_folded_teams",
            "Teams whose series are summed into team=\"other\" (beyond ETT_METRICS_MAX_TEAMS).",
        )
        if snap is not None:
            for team, n in snap.folded_models.items():
                folded.add_metric([team], n)
            folded_teams.add_metric([], snap.folded_teams)
        yield folded
        yield folded_teams
        yield last
        yield lag
        yield leader
        yield quarantined

        settled = CounterMetricFamily(
            "ett_settled_gpu_seconds",
            "Settled GPU-seconds by model, model team, component and owning team.",
            labels=["model", "team", "component", "owner"],
        )
        held = CounterMetricFamily(
            "ett_held_gpu_seconds", "Settled held GPU-seconds by model.", labels=["model", "team"]
        )
        revisions = CounterMetricFamily(
            "ett_settled_revisions_gpu_seconds",
            "Settled GPU-seconds that late events revised after they were exported.",
            labels=["model"],
        )
        at_risk = GaugeMetricFamily(
            "ett_at_risk_gpu_seconds",
            "Training GPU-seconds of running attempts since their last durable checkpoint.",
            labels=["model", "team"],
        )
        running = GaugeMetricFamily(
            "ett_jobs_running", "Jobs with a running attempt.", labels=["model", "team"]
        )
        failures = CounterMetricFamily(
            "ett_failures", "Interruptions (NoF) by cause.", labels=["model", "team", "cause"]
        )
        unknown = CounterMetricFamily(
            "ett_unknown_phase_events",
            "Phase events whose phase the taxonomy does not know (time goes to unattributed).",
            labels=["model"],
        )
        stalled_jobs = GaugeMetricFamily(
            "ett_stalled_jobs",
            "Running jobs whose steps stopped advancing for longer than their stall threshold.",
            labels=["team", "model"],
        )
        stalled_gpu = CounterMetricFamily(
            "ett_stalled_gpu_seconds",
            "GPU-seconds held while the job's steps did not advance (phase stalled).",
            labels=["team", "model"],
        )
        ratio_families = {
            (level, window): GaugeMetricFamily(
                f"ett_{level}_ett_ratio_{window}",
                f"ETT ratio (effective / held GPU-seconds) per {level} over the last {window}.",
                labels={"model": ["model", "team"], "team": ["team"], "fleet": []}[level],
            )
            for level in ("model", "team", "fleet")
            for window in RATIO_WINDOWS
        }
        tts = HistogramMetricFamily(
            "ett_time_to_start_seconds",
            "Time to start (TTS) per job: allocation of attempt 0 to its first training.",
            labels=["team"],
        )
        ttr = HistogramMetricFamily(
            "ett_time_to_recover_seconds",
            "Time to recover (TTR) per interruption, by cause.",
            labels=["team", "cause"],
        )
        if snap is not None:
            held_sums: dict[Key, float] = {}
            for (model, team, comp, owner), v in sorted(self.settled.exported.items()):
                settled.add_metric([model, team, comp, owner], v)
                held_sums[(model, team)] = held_sums.get((model, team), 0.0) + v
            for key, v in sorted(held_sums.items()):
                held.add_metric(list(key), v)
            # Every model with settled time has the series, at 0 until a revision: an
            # absent series would make rate() and the panels that read it show "no data".
            # (A revision only ever lowers a key that was exported, so these are all models.)
            for model in sorted({model for model, _team in held_sums}):
                revisions.add_metric([model], self.settled.revised.get((model,), 0.0))
            for key, v in sorted(snap.at_risk_gpu_seconds.items()):
                at_risk.add_metric(list(key), v)
            for key, v in sorted(snap.jobs_running.items()):
                running.add_metric(list(key), v)
            for key, v in sorted(self.failures.exported.items()):
                failures.add_metric(list(key), v)
            for key, v in sorted(self.unknown.exported.items()):
                unknown.add_metric(list(key), v)
            for (model, team), n in sorted(snap.stalled_jobs.items()):
                stalled_jobs.add_metric([team, model], n)
            # At 0 for every model with held time, as the revisions: a panel over a fleet
            # that never stalled draws zero, not "no data".
            stalled_totals = dict.fromkeys(held_sums, 0.0) | self.stalled.exported
            for (model, team), v in sorted(stalled_totals.items()):
                stalled_gpu.add_metric([team, model], v)
            for window, levels in snap.ratios.items():
                for level, values in levels.items():
                    fam = ratio_families[(level, window)]
                    for key, (eff, tot) in sorted(values.items()):
                        if tot:
                            fam.add_metric(list(key), eff / tot)
            self._add_histograms(tts, ttr)
        yield settled
        yield held
        yield revisions
        yield at_risk
        yield running
        yield failures
        yield unknown
        yield stalled_jobs
        yield stalled_gpu
        yield from ratio_families.values()
        yield tts
        yield ttr
        yield from self._scheduler_families(snap)

    def _scheduler_families(self, snap: Snapshot | None) -> Iterator[Metric]:
        """The scheduler's word (docs/metrics.md): queue time beside ETT, never inside."""
        queue = CounterMetricFamily(
            "ett_queue_seconds",
            "Seconds attempts waited from submission (or eligibility) to allocation, as the"
            " scheduler reported them; not held time, never in ETT.", labels=["model", "team"])
        uninstrumented = CounterMetricFamily(
            "ett_uninstrumented_gpu_seconds",
            "Settled held GPU-seconds of attempts the scheduler reported and no trainer did.",
            labels=["model", "team"])
        silent = GaugeMetricFamily(
            "ett_telemetry_silent_jobs",
            "Running jobs the scheduler says are held whose trainer has sent nothing for"
            " longer than the heartbeat timeout.", labels=["model", "team"])
        if snap is not None:
            for (kind, model, team), v in sorted(self.scheduler.exported.items()):
                (queue if kind == "queue" else uninstrumented).add_metric([model, team], v)
            for key in sorted(snap.jobs_running):
                silent.add_metric(list(key), snap.telemetry_silent_jobs.get(key, 0))
        yield queue
        yield uninstrumented
        yield silent

    def _add_histograms(self, tts: HistogramMetricFamily, ttr: HistogramMetricFamily) -> None:
        series: dict[tuple[str, str, str], dict[str, float]] = {}
        for (kind, team, cause, idx), v in self.histograms.exported.items():
            series.setdefault((kind, team, cause), {})[idx] = v
        bounds = [*(str(b) for b in LEVEL1_BUCKETS), "+Inf"]
        for (kind, team, cause), values in sorted(series.items()):
            buckets, running_max = [], 0.0
            for i, bound in enumerate(bounds):
                # Clamping keeps buckets cumulative even if one was revised separately.
                running_max = max(running_max, values.get(str(i), 0.0))
                buckets.append((bound, running_max))
            total = values.get("sum", 0.0)
            if kind == "tts":
                tts.add_metric([team], buckets, total)
            else:
                ttr.add_metric([team, cause], buckets, total)


def register_aggregator_metrics(
    registry: CollectorRegistry, aggregator: Aggregator, engine: Engine,
    max_models_per_team: int = default("metrics_max_models_per_team"),
    max_teams: int = default("metrics_max_teams"),
) -> AggregatorCollector:
    """Register the exporter in `registry` and as a listener of `aggregator`, so every pass
    refreshes the snapshot."""
    collector = AggregatorCollector(engine, aggregator, max_models_per_team, max_teams)
    duration = Histogram(
        "ett_aggregation_duration_seconds", "Duration of aggregation passes.",
        buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300), registry=registry,
    )
    jobs = Counter("ett_aggregation_jobs", "Jobs recomputed by outcome.", ["outcome"],
                   registry=registry)
    for outcome in ("ok", "error"):
        jobs.labels(outcome)

    def on_pass(report: PassReport) -> None:
        duration.observe(report.duration_seconds)
        jobs.labels("ok").inc(report.jobs_recomputed)
        jobs.labels("error").inc(report.jobs_failed)
        try:
            collector.refresh(report.finished_at)
        except Exception:
            log.exception("metrics: snapshot refresh failed")

    aggregator.listen(on_pass)
    registry.register(collector)
    return collector
