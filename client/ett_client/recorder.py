"""The public ``Recorder``: one per training process, cheap calls, never raises into training.

Every recording method validates its arguments, captures a timestamp and 16 random bytes
(the future ``event_id``) and appends a tuple to the pipeline's ring; the background threads
do the encoding, spooling and sending (see ``pipeline.py``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from datetime import datetime
from types import TracebackType
from typing import Any

from ett_client import config, events
from ett_client.beat import HeartbeatThread
from ett_client.clock import AnchoredClock, format_rfc3339_us, to_epoch_us
from ett_client.errors import EttClientError, guarded, logger, warn_once
from ett_client.hooks import ProcessHooks, register_fork_handler
from ett_client.pipeline import Pipeline
from ett_client.spool import FileSpool, MemorySpool, Spool

_TUNING = frozenset(f.name for f in dataclasses.fields(config.Settings) if f.default is not
                    dataclasses.MISSING)
_STAT_KEYS = ("enqueued", "sent", "acknowledged", "duplicates", "rejected", "dead_lettered",
              "dropped", "retries", "spooled", "pending")


class _PhaseScope:
    """``with rec.phase(name):`` -- a class, not a generator, to keep the call cheap."""

    __slots__ = ("_background", "_name", "_rec")

    def __init__(self, rec: Recorder, name: str, background: bool) -> None:
        self._rec = rec
        self._name = name
        self._background = background

    def __enter__(self) -> _PhaseScope:
        self._rec.start_phase(self._name, background=self._background)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        # Close the phase even when the body raised: the failure event (if the exception
        # kills the process) comes from the excepthook, with its own timestamp.
        self._rec.end_phase(self._name)


class Recorder:
    """Records one training process's timeline for the ETT service.

    Arguments fall back to ``ETT_URL``, ``ETT_TOKEN``, ``ETT_JOB_ID``, ``ETT_MODEL``,
    ``ETT_GPUS``, ``ETT_TEAM``, ``ETT_SPOOL_DIR``; ``attempt`` to ``ETT_ATTEMPT``,
    ``TORCHELASTIC_RESTART_COUNT``, ``SLURM_RESTART_COUNT``, else 0. Under Slurm, with no
    job id given, the job is ``slurm:<SLURM_CLUSTER_NAME>:<SLURM_JOB_ID>`` (the scheduler
    adapter's name for it), the attempt Slurm's restart count and the model, unless given,
    the job name. Only ``RANK`` 0 records unless ``all_ranks=True``. Tuning keywords: see
    ``config.Settings``.

    A recorder that cannot be configured (no URL, a bad job id...) logs a warning and becomes
    a no-op; with ``strict=True`` (or ``ETT_STRICT=1``) it raises :class:`EttClientError`.
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        job_id: str | None = None,
        model: str | None = None,
        attempt: int | None = None,
        gpus: int | None = None,
        team: str | None = None,
        spool_dir: str | os.PathLike[str] | None = None,
        *,
        all_ranks: bool = False,
        strict: bool | None = None,
        sigterm_cause: str | None = None,
        install_hooks: bool = True,
        **tuning: float,
    ) -> None:
        self._strict = (strict if strict is not None
                        else os.environ.get("ETT_STRICT", "").lower() in {"1", "true", "yes"})
        self._on = False
        self._closed = False
        self._fatal_recorded = False
        self._hooks: ProcessHooks | None = None
        self._pipeline: Pipeline | None = None
        self._beat: HeartbeatThread | None = None
        # The training loop's latest optimizer step (Recorder.step); the heartbeat thread
        # sends it.
        self.latest_step: int | None = None
        self.settings: config.Settings | None = None
        try:
            unknown = set(tuning) - _TUNING
            if unknown:
                raise config.ConfigurationError(f"unknown Recorder options: {sorted(unknown)}")
            settings = config.resolve(
                url=url, token=token, job_id=job_id, model=model, attempt=attempt, gpus=gpus,
                team=team, spool_dir=spool_dir, all_ranks=all_ranks, strict=self._strict,
                sigterm_cause=sigterm_cause, tuning=tuning,
            )
        except EttClientError as exc:
            if self._strict:
                raise
            warn_once(f"config:{exc}", "ett_client: telemetry disabled: %s", exc)
            return
        self.settings = settings
        if not settings.enabled:
            logger.debug("ett_client: rank %d does not record (all_ranks=False)", settings.rank)
            return
        try:
            self._start(settings, install_hooks)
        except Exception as exc:
            if self._strict:
                raise EttClientError(f"could not start the recorder: {exc!r}") from exc
            warn_once("start", "ett_client: telemetry disabled, could not start: %r", exc,
                      exc_info=True)

    def _start(self, settings: config.Settings, install_hooks: bool) -> None:
        self._clock = AnchoredClock()
        self._urandom = os.urandom
        spool = self._open_spool(settings)
        self._pipeline = Pipeline(settings, spool)
        self._ring = self._pipeline.ring
        self._max_queue = settings.max_queue
        self._pipeline.start()
        register_fork_handler(self)
        if install_hooks:
            self._hooks = ProcessHooks(self)
            self._hooks.install()
        self._on = True

    def _open_spool(self, settings: config.Settings) -> Spool:
        if settings.spool_dir == config.MEMORY_SPOOL:
            return MemorySpool(settings.spool_max_bytes)
        try:
            return FileSpool(settings.spool_dir, settings.spool_max_bytes)
        except OSError as exc:
            if self._strict:
                raise
            warn_once("spool-dir", "ett_client: cannot use spool dir %s (%s); keeping events in "
                      "memory only", settings.spool_dir, exc)
            return MemorySpool(settings.spool_max_bytes)

    # -- the hot path ---------------------------------------------------------------------

    def _emit(self, type_: str, phase: str | None = None, attrs: dict[str, Any] | None = None,
              gpus: int | None = None) -> None:
        pipeline = self._pipeline
        assert pipeline is not None
        if not pipeline.started:  # first use in a forked child
            pipeline.start()
        ring = self._ring
        if len(ring) >= self._max_queue:
            pipeline.note_ring_drop()
        ring.append((self._clock.now_us(), self._urandom(16), type_, phase, attrs, gpus))
        pipeline.caller.enqueued += 1

    def _reject(self, exc: EttClientError) -> None:
        """An invalid call: raised in strict mode, else counted and logged once."""
        if self._strict:
            raise exc
        if self._pipeline is not None:
            self._pipeline.caller.rejected += 1
        warn_once(f"invalid:{type(exc).__name__}:{exc}", "ett_client: event not recorded: %s", exc)

    def now(self) -> float:
        """Epoch seconds on this recorder's event clock (use it for ``snapshot_ts``)."""
        clock = getattr(self, "_clock", None)
        return clock.now_us() / 1e6 if clock is not None else time.time()

    # -- public recording API -------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        """True when this process records (configured, rank 0 or all_ranks, not closed)."""
        return self._on

    @guarded()
    def allocated(self, gpus: int | None = None,
                  labels: dict[str, str] | None = None) -> None:
        """The attempt now holds its accelerators (call first thing in the process).

        `labels` (e.g. {"variant": "optimized"}) select the job into cohorts for impact
        comparisons; a job's labels are the union over its attempts.
        """
        if not self._on:
            return
        assert self.settings is not None
        count = self.settings.gpus if gpus is None else gpus
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            return self._reject(events.InvalidEventError(f"gpus must be an int >= 1: {count!r}"))
        attrs = None
        if labels is not None:
            try:
                attrs = {"labels": events.check_labels(labels)}
            except events.InvalidEventError as exc:
                return self._reject(exc)
        self._emit("allocated", gpus=count, attrs=attrs)
        assert self.settings is not None
        if self.settings.heartbeat_s > 0:
            self.start_heartbeat(self.settings.heartbeat_s)

    def step(self, step: int) -> None:
        """The optimizer step the loop reached: stored only, the heartbeat thread sends it.

        The cheapest call of the API (one attribute store, no validation, no event), so it
        can run on every step; an invalid value is rejected when a heartbeat carries it.
        """
        self.latest_step = step

    @guarded()
    def start_heartbeat(self, interval_s: float) -> None:
        """Send a heartbeat with the latest step every `interval_s` seconds from a thread of
        its own, until the release, a failure or close (a second call keeps the first
        thread). A loop that hangs then shows as stalled, not silent."""
        if not self._on or (self._beat is not None and self._beat.alive):
            return
        try:
            self._beat = HeartbeatThread(self, interval_s)
        except ValueError as exc:
            return self._reject(events.InvalidEventError(str(exc)))
        self._beat.start()

    def _stop_heartbeat(self) -> None:
        beat, self._beat = self._beat, None
        if beat is not None:
            beat.stop()

    @guarded()
    def released(self, reason: str = "completed") -> None:
        """The attempt gives its accelerators back: completed, failed, preempted, cancelled."""
        if not self._on:
            return
        try:
            reason = events.check_release_reason(reason)
        except EttClientError as exc:
            return self._reject(exc)
        self._stop_heartbeat()
        self._emit("released", attrs={"reason": reason})

    def phase(self, name: str, background: bool = False) -> _PhaseScope:
        """Context manager for a phase; nests. ``background`` phases never own time."""
        return _PhaseScope(self, name, background)

    @guarded()
    def start_phase(self, name: str, background: bool = False) -> None:
        if self._phase_recordable(name):
            self._emit("phase_start", name, {"background": True} if background else None)

    @guarded()
    def end_phase(self, name: str) -> None:
        if self._phase_recordable(name):
            self._emit("phase_end", name)

    def _phase_recordable(self, name: str) -> bool:
        """Recording is on and `name` is a valid phase (an invalid one is rejected)."""
        if not self._on:
            return False
        try:
            events.check_phase(name)
        except EttClientError as exc:
            self._reject(exc)
            return False
        return True

    @guarded()
    def checkpoint(self, snapshot_ts: float | datetime | None = None,
                   step: int | None = None) -> None:
        """A checkpoint is durable now; ``snapshot_ts`` is the training state it holds.

        ``snapshot_ts``: epoch seconds (``time.time()``) or a datetime; for an async save,
        the instant the state was staged.
        """
        if not self._on:
            return
        attrs: dict[str, Any] = {}
        try:
            if snapshot_ts is not None:
                try:
                    attrs["snapshot_ts"] = format_rfc3339_us(to_epoch_us(snapshot_ts))
                except (TypeError, ValueError, OverflowError) as exc:
                    raise events.InvalidEventError(f"snapshot_ts: {exc}") from exc
            if step is not None:
                if isinstance(step, bool) or not isinstance(step, int) or step < 0:
                    raise events.InvalidEventError(f"step must be an int >= 0: {step!r}")
                attrs["step"] = step
        except EttClientError as exc:
            return self._reject(exc)
        self._emit("checkpoint", attrs=attrs or None)

    @guarded()
    def failure(self, cause: str = "infra", reason: str | None = None) -> None:
        """The attempt failed now. ``cause``: infra, user or preemption."""
        if not self._on:
            return
        try:
            attrs: dict[str, Any] = {"cause": events.check_cause(cause)}
        except EttClientError as exc:
            return self._reject(exc)
        if reason is not None:
            attrs["reason"] = events.clip_reason(reason)
        # The first failure ends the attempt's work; the exit hooks must not add another.
        self._fatal_recorded = True
        self._stop_heartbeat()
        self._emit("failure", attrs=attrs)

    @guarded()
    def heartbeat(self, step: int | None = None) -> None:
        """Still alive (keeps an attempt without a release from being declared lost)."""
        if not self._on:
            return
        if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
            return self._reject(events.InvalidEventError(f"step must be an int >= 0: {step!r}"))
        self._emit("heartbeat", attrs={"step": step} if step is not None else None)

    # -- delivery control -----------------------------------------------------------------

    @guarded(default=False)
    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything recorded so far is answered by the service.

        Returns False at the deadline (default ``exit_timeout_s``); the events stay spooled.
        """
        if self._pipeline is None:
            return True
        if self._closed:
            return self._pipeline.stats()["pending"] == 0
        assert self.settings is not None
        return self._pipeline.flush(self.settings.exit_timeout_s if timeout is None else timeout)

    @guarded(default=False)
    def close(self, timeout: float | None = None) -> bool:
        """Flush within ``timeout`` and stop; later calls are no-ops. Runs at exit too."""
        if self._closed:
            return True
        self._closed = True
        self._on = False
        self._stop_heartbeat()
        if self._hooks is not None:
            self._hooks.uninstall()
        if self._pipeline is None:
            return True
        assert self.settings is not None
        budget = self.settings.exit_timeout_s if timeout is None else timeout
        deadline = time.monotonic() + budget
        delivered = self._pipeline.flush(budget)
        stopped = self._pipeline.stop(max(0.0, deadline - time.monotonic()))
        if not delivered:
            logger.warning("ett_client: closed with %d events not yet delivered; they stay in "
                           "the spool for the next recorder", self._pipeline.stats()["pending"])
        return delivered and stopped

    def stats(self) -> dict[str, int]:
        """Counters: enqueued, spooled, sent, acknowledged, duplicates, rejected (by the
        service, or invalid calls), dead_lettered (rejected events kept in the dead-letter
        file beside the spool), dropped, retries, and pending (recorded but not yet
        answered)."""
        try:
            if self._pipeline is None:
                return dict.fromkeys(_STAT_KEYS, 0)
            return self._pipeline.stats()
        except Exception:
            return dict.fromkeys(_STAT_KEYS, 0)

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- called by hooks ------------------------------------------------------------------

    def _owns_thread(self, thread: threading.Thread | None) -> bool:
        return self._pipeline is not None and self._pipeline.is_own_thread(thread)

    def _record_fatal(self, record: Any) -> None:
        """Record the one terminal event a dying process gets, then flush within the bound."""
        if not self._on:
            return
        try:
            if not self._fatal_recorded:
                record()
                self._fatal_recorded = True
            # Flush even when the trainer recorded the failure itself: the process dies
            # next, and an event still in the ring (the spool thread may not have run since,
            # on a loaded machine) would die with it.
            self.flush()
        except Exception:  # a hook must never make the crash worse
            logger.debug("ett_client: recording the terminal event failed", exc_info=True)

    def _on_uncaught(self, exc_type: type[BaseException], exc: BaseException | None,
                     description: str) -> None:
        if issubclass(exc_type, KeyboardInterrupt):
            # Ctrl-C is someone stopping the job on purpose: not an interruption.
            self._record_fatal(lambda: self.released(reason="cancelled"))
        else:
            self._record_fatal(lambda: self.failure(cause="user", reason=description))

    def _on_sigterm(self) -> None:
        assert self.settings is not None
        cause = self.settings.sigterm_cause
        if not self.settings.sigterm_reports_failure:
            # Under a scheduler adapter: the last news, and the scheduler says why.
            self._record_fatal(self.heartbeat)
            return
        self._record_fatal(lambda: self.failure(cause=cause, reason="SIGTERM"))

    def _on_exit(self) -> None:
        try:
            self.close()
        except Exception:
            logger.debug("ett_client: close at exit failed", exc_info=True)

    def _after_fork_in_child(self) -> None:
        if self._pipeline is None or self._closed:
            return
        self._pipeline.after_fork_in_child()
        # The clock keeps its anchor: perf_counter carries on across fork.
        self._ring = self._pipeline.ring


logging.getLogger("ett_client").addHandler(logging.NullHandler())
