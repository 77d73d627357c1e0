"""PyTorch helpers (``pip install ett-client[torch]``): compilation, async DCP checkpoints.

* :func:`track_compilation` times every ``torch.compile`` compilation (first call and every
  recompile, forward and lazily compiled backward) as the ``compilation`` phase, using the
  compile callbacks Dynamo runs around each compilation
  (``torch._dynamo.callback.callback_handler``). Nested compilations are folded into one
  phase by Dynamo itself (it only calls the start/end callbacks at depth one).
* :func:`async_save` wraps ``torch.distributed.checkpoint.async_save``: the blocking part
  (staging) is the ``checkpoint_save`` phase, and the ``checkpoint`` event is recorded when
  the save's future completes, with ``snapshot_ts`` = the instant the state was captured.
* :func:`load` wraps ``torch.distributed.checkpoint.load`` in the ``checkpoint_load`` phase.
* :func:`elastic_attempt` is torchelastic's restart count (what ``Recorder`` uses by default).

Every helper works on every rank (collectives must run everywhere); only a recording rank
emits events.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import torch

from ett_client.errors import logger, warn_once
from ett_client.recorder import Recorder

COMPILATION = "compilation"
CHECKPOINT_SAVE = "checkpoint_save"
CHECKPOINT_LOAD = "checkpoint_load"


def elastic_attempt() -> int:
    """The restart index torchelastic gives this worker (0 on the first start)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)


class CompilationTracker:
    """Registered Dynamo compile callbacks; :meth:`remove` unregisters them."""

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder
        self._handler: Any = None
        try:
            from torch._dynamo.callback import callback_handler
        except ImportError:  # torch < 2.6 has no compile callbacks
            warn_once("torch-callbacks", "ett_client: this torch has no compile callbacks; "
                      "compilation time is not recorded")
            return
        self._handler = callback_handler
        callback_handler.register_start_callback(self._on_start)
        callback_handler.register_end_callback(self._on_end)

    @property
    def active(self) -> bool:
        return self._handler is not None

    def _on_start(self, args: Any = None) -> None:
        self._recorder.start_phase(COMPILATION)

    def _on_end(self, args: Any = None) -> None:
        self._recorder.end_phase(COMPILATION)

    def remove(self) -> None:
        if self._handler is None:
            return
        for remove, callback in ((self._handler.remove_start_callback, self._on_start),
                                 (self._handler.remove_end_callback, self._on_end)):
            with contextlib.suppress(ValueError):
                remove(callback)
        self._handler = None


def track_compilation(recorder: Recorder) -> CompilationTracker:
    """Record every torch.compile compilation in this process as the ``compilation`` phase."""
    return CompilationTracker(recorder)


def compile(recorder: Recorder, model: Callable[..., Any], **kwargs: Any) -> Any:
    """``torch.compile(model, **kwargs)`` with its compilations recorded.

    The tracker lives as long as the returned object (it is kept on it when possible).
    """
    tracker = track_compilation(recorder)
    compiled = torch.compile(model, **kwargs)
    # Plain functions and modules take attributes; anything else just keeps a global tracker.
    with contextlib.suppress(AttributeError):
        compiled._ett_compilation_tracker = tracker  # type: ignore[union-attr]
    return compiled


def async_save(recorder: Recorder, state_dict: dict[str, Any], *, step: int | None = None,
               **kwargs: Any) -> Any:
    """``torch.distributed.checkpoint.async_save`` with its blocking part and completion
    recorded. Returns what ``async_save`` returns (a Future, or an AsyncSaveResponse)."""
    import torch.distributed.checkpoint as dcp

    with recorder.phase(CHECKPOINT_SAVE):
        # Training is blocked from here until staging ends: the state saved is this instant's.
        snapshot_ts = recorder.now()
        result = dcp.async_save(state_dict, **kwargs)
    # Newer torch may return an AsyncSaveResponse whose upload_completion is the durable end.
    durable: Future[Any] = getattr(result, "upload_completion", result)

    def on_done(future: Future[Any]) -> None:
        try:
            error = future.exception()
        except Exception as exc:  # cancelled
            error = exc
        if error is not None:
            logger.warning("ett_client: async checkpoint (step %s) failed: %r; no checkpoint "
                           "event recorded", step, error)
            return
        recorder.checkpoint(snapshot_ts=snapshot_ts, step=step)

    durable.add_done_callback(on_done)
    return result


def save(recorder: Recorder, state_dict: dict[str, Any], *, step: int | None = None,
         **kwargs: Any) -> Any:
    """Synchronous ``torch.distributed.checkpoint.save``: durable when it returns."""
    import torch.distributed.checkpoint as dcp

    with recorder.phase(CHECKPOINT_SAVE):
        snapshot_ts = recorder.now()
        result = dcp.save(state_dict, **kwargs)
    recorder.checkpoint(snapshot_ts=snapshot_ts, step=step)
    return result


def load(recorder: Recorder, state_dict: dict[str, Any], **kwargs: Any) -> None:
    """``torch.distributed.checkpoint.load`` (in place) as the ``checkpoint_load`` phase."""
    import torch.distributed.checkpoint as dcp

    with recorder.phase(CHECKPOINT_LOAD):
        dcp.load(state_dict, **kwargs)
