"""What every trainer callback records, whatever the framework calls its hooks.

An attempt's life under a trainer is always the same: allocated, then initialization until
the first batch, then training (with validation and checkpoint saves nested inside it,
which the service's innermost-phase rule attributes to them), then a release or a
failure. The framework callbacks only decide *when* each step happens.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ett_client.recorder import Recorder

INITIALIZATION = "pre_train"
TRAINING = "training"
VALIDATION = "validation"
CHECKPOINT_SAVE = "checkpoint_save"


class TrainerTimeline:
    """Phase bookkeeping for one attempt; every call is a cheap no-op once finished."""

    def __init__(self, recorder: Recorder, heartbeat_s: float = 60.0,
                 failure_cause: str = "user") -> None:
        self.recorder = recorder
        self.heartbeat_s = heartbeat_s
        self.failure_cause = failure_cause
        self._open: list[str] = []
        self._started = False
        self._training = False
        self._finished = False

    @property
    def training(self) -> bool:
        return self._training

    def begin(self, gpus: int | None) -> None:
        """The attempt holds its accelerators; initialization runs until the first batch."""
        if self._started:
            return
        self._started = True
        self.recorder.allocated(gpus=gpus)
        # Heartbeats (with the latest step) come from a thread of their own, so a hung
        # step shows as a stall and the step path does no more than store a number.
        self.recorder.start_heartbeat(self.heartbeat_s)
        self.enter(INITIALIZATION)

    def enter(self, name: str) -> None:
        if self._finished:
            return
        self.recorder.start_phase(name)
        self._open.append(name)

    def leave(self, name: str) -> None:
        if self._finished or name not in self._open:
            return
        # Close what opened inside it first, so the phases stay nested on the wire.
        while self._open:
            inner = self._open.pop()
            self.recorder.end_phase(inner)
            if inner == name:
                break

    def step(self, step: int | None = None) -> None:
        """A training step begins: the first one ends initialization."""
        if not self._training and self._started and not self._finished:
            self.leave(INITIALIZATION)
            self.enter(TRAINING)
            self._training = True
            if step is not None:
                # The step training starts from, at once: after a resume it is the step of
                # the state that was loaded (docs/model.md section 24).
                self.recorder.heartbeat(step=step)
        if step is not None:
            self.recorder.latest_step = step

    @contextlib.contextmanager
    def checkpoint_save(self, *, background: bool = False, durable: bool = True,
                        snapshot: float | None = None) -> Iterator[None]:
        """Around one save: the `checkpoint_save` phase and, if `durable`, a checkpoint at
        its end whose snapshot is `snapshot`, else the save's start (the state written is
        the one the save began from). A save that raises records no checkpoint."""
        if self._finished:
            yield
            return
        snapshot = self.recorder.now() if snapshot is None else snapshot
        self.recorder.start_phase(CHECKPOINT_SAVE, background=background)
        try:
            yield
        finally:
            self.recorder.end_phase(CHECKPOINT_SAVE)
        if durable:
            self.recorder.checkpoint(snapshot_ts=snapshot)

    def fail(self, exc: BaseException) -> None:
        """The attempt's work ended with `exc` (cause `failure_cause`: an exception out of the
        training code is the job's own, `user`, unless the caller knows better); Ctrl-C is a
        cancel, not an interruption."""
        if self._finished or not self._started:
            return
        if isinstance(exc, KeyboardInterrupt):
            self.finish("cancelled")
            return
        self.leave_all()
        self.recorder.failure(cause=self.failure_cause, reason=f"{type(exc).__name__}: {exc}")
        self.finish("failed")

    def leave_all(self) -> None:
        while self._open:
            self.recorder.end_phase(self._open.pop())

    def finish(self, reason: str = "completed") -> None:
        """Close every phase and release the accelerators (once), then flush."""
        if self._finished or not self._started:
            return
        self.leave_all()
        self.recorder.released(reason=reason)
        self._finished = True
        self.recorder.flush()


class RecorderCallback:
    """What every framework callback holds: the recorder it was given, or the settings to
    make its own (and close it at the end), and the attempt's timeline once it began."""

    def __init__(self, recorder: Recorder | None = None, *, heartbeat_s: float = 60.0,
                 failure_cause: str = "user", **recorder_kwargs: Any) -> None:
        self._given = recorder
        self._failure_cause = failure_cause
        self._kwargs = recorder_kwargs
        self._heartbeat_s = heartbeat_s
        self._recorder: Recorder | None = None
        self._timeline: TrainerTimeline | None = None

    @property
    def recorder(self) -> Recorder | None:
        return self._recorder

    def _open_timeline(self) -> TrainerTimeline | None:
        """Take or make the recorder; the attempt's timeline, or None when recording is off."""
        rec = self._given or Recorder(all_ranks=True, **self._kwargs)
        self._recorder = rec
        if not rec.enabled:
            return None
        self._timeline = TrainerTimeline(rec, heartbeat_s=self._heartbeat_s,
                                         failure_cause=self._failure_cause)
        return self._timeline

    def _close_recorder(self) -> None:
        if self._given is None and self._recorder is not None:
            self._recorder.close()
        self._timeline = None
