"""Process hooks: a failure event on an uncaught exception or SIGTERM, close at exit, fork.

Each hook chains to whatever was installed before it, and reaches the recorder through a
weak reference so that hooks never keep a closed recorder alive. Handlers are bounded by
``exit_timeout_s``: a dying trainer must not hang on an unreachable service (its events are
on disk by then; the next recorder sends them).
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import weakref
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any, Protocol

from ett_client.errors import logger


class HookTarget(Protocol):
    """What the hooks call back (the Recorder); hooks never import the recorder itself."""

    def _on_uncaught(self, exc_type: type[BaseException], exc: BaseException | None,
                     description: str) -> None: ...

    def _owns_thread(self, thread: threading.Thread | None) -> bool: ...

    def _on_sigterm(self) -> None: ...

    def _on_exit(self) -> None: ...

    def _after_fork_in_child(self) -> None: ...

_SignalHandler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


def _describe(exc_type: type[BaseException], exc: BaseException | None) -> str:
    text = f"{exc_type.__name__}: {exc}" if exc is not None and str(exc) else exc_type.__name__
    return f"uncaught {text}"


class ProcessHooks:
    def __init__(self, recorder: HookTarget) -> None:
        self._ref: weakref.ref[HookTarget] = weakref.ref(recorder)
        self._prev_excepthook: Callable[..., Any] | None = None
        self._prev_thread_hook: Callable[..., Any] | None = None
        self._prev_sigterm: _SignalHandler = None
        self._sigterm_installed = False

    def install(self) -> None:
        self._prev_excepthook = sys.excepthook
        sys.excepthook = self._excepthook
        self._prev_thread_hook = threading.excepthook
        threading.excepthook = self._thread_excepthook
        # signal.signal only works on the main thread of the main interpreter.
        if threading.current_thread() is threading.main_thread():
            try:
                self._prev_sigterm = signal.getsignal(signal.SIGTERM)
                signal.signal(signal.SIGTERM, self._on_sigterm)
                self._sigterm_installed = True
            except (ValueError, OSError) as exc:
                logger.debug("ett_client: SIGTERM hook not installed: %s", exc)
        atexit.register(self._atexit)

    def uninstall(self) -> None:
        """Put back what we replaced, where nobody has replaced us since."""
        if sys.excepthook == self._excepthook and self._prev_excepthook is not None:
            sys.excepthook = self._prev_excepthook
        if threading.excepthook == self._thread_excepthook and self._prev_thread_hook is not None:
            threading.excepthook = self._prev_thread_hook
        if self._sigterm_installed and threading.current_thread() is threading.main_thread():
            try:
                if signal.getsignal(signal.SIGTERM) == self._on_sigterm:
                    signal.signal(signal.SIGTERM, self._prev_sigterm or signal.SIG_DFL)
                    self._sigterm_installed = False
            except (ValueError, OSError):
                pass
        atexit.unregister(self._atexit)

    # -- handlers -------------------------------------------------------------------------

    def _excepthook(self, exc_type: type[BaseException], exc: BaseException,
                    tb: TracebackType | None) -> None:
        try:
            rec = self._ref()
            if rec is not None:
                rec._on_uncaught(exc_type, exc, _describe(exc_type, exc))
        finally:
            prev = self._prev_excepthook or sys.__excepthook__
            prev(exc_type, exc, tb)

    def _thread_excepthook(self, args: threading.ExceptHookArgs) -> None:
        try:
            rec = self._ref()
            if (rec is not None and args.exc_type is not SystemExit
                    and not rec._owns_thread(args.thread)):
                name = args.thread.name if args.thread is not None else "?"
                rec._on_uncaught(args.exc_type, args.exc_value,
                                 f"{_describe(args.exc_type, args.exc_value)} in thread {name}")
        finally:
            prev = self._prev_thread_hook or threading.__excepthook__
            prev(args)

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        rec = self._ref()
        if rec is not None:
            rec._on_sigterm()
        prev = self._prev_sigterm
        if callable(prev):
            prev(signum, frame)
            return
        if prev == signal.SIG_IGN:
            return
        # Nobody else handled SIGTERM: die of it, as the process would have without us.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    def _atexit(self) -> None:
        rec = self._ref()
        if rec is not None:
            rec._on_exit()


def register_fork_handler(recorder: HookTarget) -> None:
    """Rebuild the recorder's worker in a forked child (DataLoader workers fork).

    ``os.register_at_fork`` cannot be undone, so the handler holds only a weak reference.
    """
    ref = weakref.ref(recorder)

    def after_in_child() -> None:
        rec = ref()
        if rec is not None:
            rec._after_fork_in_child()

    os.register_at_fork(after_in_child=after_in_child)
