"""PyTorch Lightning 2.x: ``Trainer(callbacks=[EttCallback()])`` records the attempt.

``pip install 'ett-client[lightning]'``. What each hook records:

* ``setup`` (stage ``fit``): ``allocated`` (``ETT_GPUS``, else the trainer's world size),
  then ``pre_train`` (initialization) until the first training batch, which starts
  ``training``. Checkpoint loads on resume are ``checkpoint_load``.
* ``torch.compile`` compilations: ``compilation`` (Dynamo's compile callbacks).
* checkpoint saves, through the strategy's checkpoint IO plugin: ``checkpoint_save`` and a
  ``checkpoint`` whose snapshot is the save's start. With ``AsyncCheckpointIO`` the
  foreground ``checkpoint_save`` is the staging (the copy of the tensors training waits
  for); the write on the plugin's thread is a background ``checkpoint_save``, and the
  ``checkpoint`` is recorded when it finishes, with the staging instant as snapshot.
* validation during fit: ``validation`` (the taxonomy decides its component; the sanity
  check before training stays initialization).
* an exception: ``failure`` (cause ``user``; Ctrl-C is a ``cancelled`` release instead).
* ``teardown``: ``released``.

Only global rank 0 records. The attempt comes from the recorder (``ETT_ATTEMPT``, else the
launcher's restart count: torchelastic's or Slurm's).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import lightning.pytorch as pl
from lightning.fabric.plugins import CheckpointIO
from lightning.pytorch.plugins.io import AsyncCheckpointIO

from ett_client.recorder import Recorder
from ett_client.torch_helpers import CHECKPOINT_LOAD, CompilationTracker, track_compilation

from .timeline import VALIDATION, RecorderCallback, TrainerTimeline


class _RecordingCheckpointIO(CheckpointIO):
    """Delegates to the strategy's plugin, recording each save and load around it.

    With `staged` (the plugin is an ``AsyncCheckpointIO``) a save is only staged here (the
    tensors copied on the training thread, a foreground `checkpoint_save`); the instant of
    the copy is queued for the write that the plugin's thread does later.
    """

    def __init__(self, inner: CheckpointIO, timeline: TrainerTimeline,
                 staged: deque[float] | None = None) -> None:
        self.inner = inner
        self._timeline = timeline
        self._staged = staged

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any,
                        storage_options: Any | None = None) -> None:
        if self._staged is None:
            with self._timeline.checkpoint_save():
                self.inner.save_checkpoint(checkpoint, path, storage_options=storage_options)
            return
        with self._timeline.checkpoint_save(durable=False):
            self._staged.append(self._timeline.recorder.now())
            self.inner.save_checkpoint(checkpoint, path, storage_options=storage_options)

    def load_checkpoint(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        with self._timeline.recorder.phase(CHECKPOINT_LOAD):
            return self.inner.load_checkpoint(*args, **kwargs)

    def remove_checkpoint(self, path: Any) -> None:
        self.inner.remove_checkpoint(path)

    def teardown(self) -> None:
        self.inner.teardown()


class _RecordingWrite(CheckpointIO):
    """The write an ``AsyncCheckpointIO`` runs on its thread: a background phase, then the
    durable checkpoint of the state staged for it (its one worker writes in order)."""

    def __init__(self, inner: CheckpointIO, timeline: TrainerTimeline,
                 staged: deque[float]) -> None:
        self.inner = inner
        self._timeline = timeline
        self._staged = staged

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any,
                        storage_options: Any | None = None) -> None:
        snapshot = self._staged.popleft() if self._staged else None
        with self._timeline.checkpoint_save(background=True, snapshot=snapshot):
            self.inner.save_checkpoint(checkpoint, path, storage_options=storage_options)

    def load_checkpoint(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self.inner.load_checkpoint(*args, **kwargs)

    def remove_checkpoint(self, path: Any) -> None:
        self.inner.remove_checkpoint(path)


class EttCallback(RecorderCallback, pl.Callback):
    """Records the fitting attempt of the trainer it is given to.

    ``recorder``: an existing :class:`~ett_client.Recorder`; without one the callback makes
    its own from ``recorder_kwargs`` and the ``ETT_*`` environment, and closes it at the end.
    ``failure_cause``: the cause recorded for an exception (``user``, ``infra``,
    ``preemption``).
    """

    def __init__(self, recorder: Recorder | None = None, *, heartbeat_s: float = 60.0,
                 failure_cause: str = "user", **recorder_kwargs: Any) -> None:
        super().__init__(recorder, heartbeat_s=heartbeat_s, failure_cause=failure_cause,
                         **recorder_kwargs)
        self._compile: CompilationTracker | None = None
        self._wrapped: tuple[Any, CheckpointIO] | None = None
        self._async: tuple[AsyncCheckpointIO, CheckpointIO] | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit" or self._timeline is not None or trainer.global_rank != 0:
            return
        timeline = self._open_timeline()
        if timeline is None:
            return
        rec = timeline.recorder
        gpus = rec.settings.gpus if rec.settings is not None else None
        timeline.begin(gpus if gpus is not None else max(1, trainer.world_size))
        self._compile = track_compilation(rec)
        self._wrap_checkpoint_io(trainer, timeline)

    def _wrap_checkpoint_io(self, trainer: pl.Trainer, timeline: TrainerTimeline) -> None:
        strategy = trainer.strategy
        current = strategy.checkpoint_io  # also gives an AsyncCheckpointIO its base plugin
        staged: deque[float] | None = None
        if isinstance(current, AsyncCheckpointIO) and current.checkpoint_io is not None:
            staged = deque()
            base = current.checkpoint_io
            # The public setter keeps the first base plugin for good; the write must run
            # through ours, so it is swapped in (and back at the end) underneath it.
            current._checkpoint_io = _RecordingWrite(base, timeline, staged)
            self._async = (current, base)
        strategy.checkpoint_io = _RecordingCheckpointIO(current, timeline, staged)
        self._wrapped = (strategy, current)

    def _unwrap(self) -> None:
        if self._wrapped is not None:
            strategy, original = self._wrapped
            strategy.checkpoint_io = original
            self._wrapped = None
        if self._async is not None:
            plugin, base = self._async
            plugin._checkpoint_io = base
            self._async = None
        if self._compile is not None:
            self._compile.remove()
            self._compile = None

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                             batch: Any, batch_idx: int) -> None:
        if self._timeline is not None:
            self._timeline.step(trainer.global_step)

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._timeline is not None and not trainer.sanity_checking:
            self._timeline.enter(VALIDATION)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._timeline is not None and not trainer.sanity_checking:
            self._timeline.leave(VALIDATION)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                     exception: BaseException) -> None:
        if self._timeline is not None:
            self._timeline.fail(exception)
            self._end()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit" and self._timeline is not None:
            self._drain_async_saves()
            self._timeline.finish("completed")
            self._end()

    def _drain_async_saves(self) -> None:
        """Wait for async writes, so their checkpoints are recorded before the release
        (the strategy's own teardown, which would wait too, runs after this hook)."""
        if self._async is not None:
            self._async[0].teardown()

    def _end(self) -> None:
        self._unwrap()
        self._close_recorder()
