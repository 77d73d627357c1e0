"""Fixtures for the client's tests: a scripted fake service and fast-ticking recorders."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ett_client import Recorder

from tests.client.fake_service import FakeService

# Short timers so that retry and deadline tests take milliseconds, not seconds.
FAST = {
    "send_interval_s": 0.02,
    "spool_interval_s": 0.005,
    "backoff_base_s": 0.02,
    "backoff_max_s": 0.1,
    "request_timeout_s": 2.0,
    "exit_timeout_s": 2.0,
}


@pytest.fixture
def fake() -> Iterator[FakeService]:
    server = FakeService()
    yield server
    server.close()


@pytest.fixture
def make_recorder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Build recorders with fast timers, no process hooks, and a spool under tmp_path."""
    for name in ("RANK", "TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT", "ETT_ATTEMPT",
                 "ETT_STRICT", "WORLD_SIZE", "ETT_SPOOL_DIR", "ETT_SIGTERM_CAUSE", "SLURM_JOB_ID",
                 "SLURM_CLUSTER_NAME", "SLURM_JOB_NAME"):
        monkeypatch.delenv(name, raising=False)
    made: list[Recorder] = []

    def make(url: str, **kwargs: Any) -> Recorder:
        options: dict[str, Any] = {
            "token": "t", "job_id": "job-1", "model": "model-a", "gpus": 8,
            "spool_dir": str(tmp_path / "spool"), "install_hooks": False, **FAST,
        }
        options.update(kwargs)
        rec = Recorder(url=url, **options)
        made.append(rec)
        return rec

    yield make
    for rec in made:
        rec.close(timeout=0.5)
