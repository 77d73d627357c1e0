"""The heartbeat thread: liveness and the latest step, off the training thread.

A hang is the training thread stopping while the process lives on. So liveness must not
come from the training loop (a hung loop would look dead, not stalled) and progress must
not cost the loop anything: the loop stores its step in a plain attribute
(``Recorder.step``), and this thread sends it with each heartbeat. The service reads the
steps' advances (docs/model.md section 24).
"""

from __future__ import annotations

import threading
from typing import Protocol


class _Beating(Protocol):
    latest_step: int | None

    def heartbeat(self, step: int | None = None) -> None: ...


class HeartbeatThread:
    """Every `interval_s`, one heartbeat carrying the recorder's latest step."""

    def __init__(self, recorder: _Beating, interval_s: float) -> None:
        if not interval_s > 0:
            raise ValueError(f"heartbeat interval must be > 0 seconds: {interval_s!r}")
        self._recorder = recorder
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ett-client-heartbeat",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self._stop.is_set()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)

    def _run(self) -> None:
        recorder = self._recorder
        while not self._stop.wait(self.interval_s):
            # Recorder.heartbeat validates the step and never raises (unless strict).
            try:
                recorder.heartbeat(step=recorder.latest_step)
            except Exception:  # a strict recorder's rejection must not kill the thread
                continue
