"""Hugging Face ``Trainer``: ``Trainer(..., callbacks=[EttCallback()])`` records the attempt.

``pip install 'ett-client[transformers]'``. The ``TrainerCallback`` hooks, in the order the
``Trainer`` calls them:

* ``on_init_end`` (or ``on_train_begin`` for a callback added later): ``allocated``
  (``ETT_GPUS``, else the trainer's world size), then ``pre_train`` (initialization) until
  the first step.
* ``on_step_begin`` (the first): ``training``, which nests everything below.
* ``on_step_end``: when the trainer decided to evaluate, ``validation`` starts here (the
  evaluation loop runs next) and ``on_evaluate`` ends it; when it decided to save,
  ``checkpoint_save`` starts (after the evaluation, if any) and ``on_save``, which the
  trainer calls once the files are written, ends it with a ``checkpoint`` whose snapshot is
  the save's start.
* ``on_train_end``: ``released`` (completed).

The ``Trainer`` has no exception hook: an exception that ends the process is recorded as a
``failure`` by the recorder's own exit hooks; code that catches it and goes on calls
:meth:`EttCallback.failed`. Only the world's process zero records.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from ett_client.recorder import Recorder

from .timeline import CHECKPOINT_SAVE, VALIDATION, RecorderCallback


class EttCallback(RecorderCallback, TrainerCallback):
    """Records the training attempt of the ``Trainer`` it is given to.

    ``recorder``: an existing :class:`~ett_client.Recorder`; without one the callback makes
    its own from ``recorder_kwargs`` and the ``ETT_*`` environment, and closes it at the end.
    ``failure_cause``: the cause recorded for an exception (``user``, ``infra``,
    ``preemption``).
    """

    def __init__(self, recorder: Recorder | None = None, *, heartbeat_s: float = 60.0,
                 failure_cause: str = "user", **recorder_kwargs: Any) -> None:
        super().__init__(recorder, heartbeat_s=heartbeat_s, failure_cause=failure_cause,
                         **recorder_kwargs)
        self._snapshot: float | None = None

    def on_init_end(self, args: TrainingArguments, state: TrainerState,
                    control: TrainerControl, **kwargs: Any) -> None:
        self._begin(args, state)

    def on_train_begin(self, args: TrainingArguments, state: TrainerState,
                       control: TrainerControl, **kwargs: Any) -> None:
        # A callback added after the trainer was built (`trainer.add_callback`) never saw
        # on_init_end: its attempt starts here instead.
        self._begin(args, state)

    def _begin(self, args: TrainingArguments, state: TrainerState) -> None:
        if self._recorder is not None or not state.is_world_process_zero:
            return
        timeline = self._open_timeline()
        if timeline is None:
            return
        rec = timeline.recorder
        gpus = rec.settings.gpus if rec.settings is not None else None
        timeline.begin(gpus if gpus is not None else max(1, args.world_size))

    def on_step_begin(self, args: TrainingArguments, state: TrainerState,
                      control: TrainerControl, **kwargs: Any) -> None:
        if self._timeline is not None:
            self._timeline.step(state.global_step)

    def on_step_end(self, args: TrainingArguments, state: TrainerState,
                    control: TrainerControl, **kwargs: Any) -> None:
        # The flow callback (always first in the list) has set should_evaluate/should_save.
        if self._timeline is None:
            return
        if control.should_evaluate:
            self._timeline.enter(VALIDATION)
        elif control.should_save:
            self._start_save()

    def on_evaluate(self, args: TrainingArguments, state: TrainerState,
                    control: TrainerControl, **kwargs: Any) -> None:
        if self._timeline is None:
            return
        self._timeline.leave(VALIDATION)
        if control.should_save:
            self._start_save()

    def _start_save(self) -> None:
        assert self._timeline is not None
        if self._snapshot is None:
            self._snapshot = self._timeline.recorder.now()
            self._timeline.enter(CHECKPOINT_SAVE)

    def on_save(self, args: TrainingArguments, state: TrainerState,
                control: TrainerControl, **kwargs: Any) -> None:
        if self._timeline is None:
            return
        if self._snapshot is None:  # a save the flow did not announce (the final one)
            self._timeline.recorder.checkpoint(step=state.global_step)
            return
        self._timeline.leave(CHECKPOINT_SAVE)
        self._timeline.recorder.checkpoint(snapshot_ts=self._snapshot, step=state.global_step)
        self._snapshot = None

    def on_train_end(self, args: TrainingArguments, state: TrainerState,
                     control: TrainerControl, **kwargs: Any) -> None:
        if self._timeline is not None:
            self._timeline.finish("completed")
            self._end()

    def failed(self, exc: BaseException) -> None:
        """Record that ``train()`` raised ``exc`` (for code that catches it and goes on)."""
        if self._timeline is not None:
            self._timeline.fail(exc)
            self._end()

    def _end(self) -> None:
        self._close_recorder()
