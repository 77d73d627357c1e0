"""A real Lightning `Trainer.fit` on the CPU with `EttCallback`, against a real `ett serve`:
a first attempt killed by an injected exception, a second resumed from its checkpoint,
measured like the test's own clock says."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("lightning")

import lightning.pytorch as pl
import torch
from ett_client.integrations.lightning import EttCallback
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import AsyncCheckpointIO
from sqlalchemy import text
from torch.utils.data import DataLoader, TensorDataset

from service.store.engine import make_engine
from tests.client.trainer_truth import AttemptTruth, check, expected

pytestmark = pytest.mark.slow
FAST = {"send_interval_s": 0.05, "backoff_base_s": 0.05, "backoff_max_s": 0.2,
        "request_timeout_s": 5.0}
STEP_S = 0.01


class Tiny(pl.LightningModule):
    def __init__(self, fail_at: int | None = None) -> None:
        super().__init__()
        self.net = torch.nn.Linear(8, 1)
        # Compiled with the eager backend: Dynamo's compile callbacks fire, no C++ compiler.
        self.compiled = torch.compile(self.net, backend="eager")
        self.fail_at = fail_at

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.global_step == self.fail_at:
            raise RuntimeError("injected failure")
        time.sleep(STEP_S)
        x, y = batch
        return torch.nn.functional.mse_loss(self.compiled(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        time.sleep(STEP_S)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Truth(pl.Callback):
    """The test's own clock at the hooks it shares with the trainer (not with EttCallback)."""

    def __init__(self) -> None:
        self.a = AttemptTruth()
        self._val: float | None = None

    def setup(self, trainer, pl_module, stage) -> None:
        self.a.start = time.time()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if not self.a.first_batch:
            self.a.first_batch = time.time()

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        self.a.snapshots.append(time.time())

    def on_validation_start(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            self._val = time.time()

    def on_validation_end(self, trainer, pl_module) -> None:
        if self._val is not None:
            self.a.validations.append((self._val, time.time()))
            self._val = None

    def on_exception(self, trainer, pl_module, exception) -> None:
        self.a.failure = self.a.end = time.time()

    def teardown(self, trainer, pl_module, stage) -> None:
        # The attempt ends where EttCallback records `released` (its teardown, which runs
        # just after this one): what follows, the SDK's flush to the service, is not held
        # time, and on a busy machine it can take a second.
        if self.a.failure is None:
            self.a.end = time.time()


def loader(n: int) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(n, 8, generator=g), torch.randn(n, 1, generator=g)),
                      batch_size=1)


def fit(service: Any, job_id: str, attempt: int, ckpt_dir: Path, *, fail_at: int | None,
        resume: str | None = None, plugins: list[Any] | None = None) -> AttemptTruth:
    ett = EttCallback(url=service.url, token=service.token, job_id=job_id, model="tiny-pl",
                      team="research", attempt=attempt, spool_dir=str(ckpt_dir / f"spool{attempt}"),
                      install_hooks=False, **FAST)
    truth = Truth()
    trainer = pl.Trainer(
        accelerator="cpu", devices=1, max_steps=300, val_check_interval=100,
        limit_val_batches=5, num_sanity_val_steps=2, logger=False, enable_progress_bar=False,
        enable_model_summary=False, plugins=plugins,
        callbacks=[truth, ett, ModelCheckpoint(dirpath=ckpt_dir, every_n_train_steps=60,
                                               save_top_k=-1)])
    model = Tiny(fail_at=fail_at)
    if fail_at is None:
        trainer.fit(model, loader(400), loader(5), ckpt_path=resume)
    else:
        with pytest.raises(RuntimeError, match="injected failure"):
            trainer.fit(model, loader(400), loader(5), ckpt_path=resume)
    assert ett.recorder is not None and ett.recorder.stats()["rejected"] == 0
    return truth.a


def job_result(service: Any, job_id: str) -> dict[str, Any]:
    assert httpx.post(service.url + "/v1/aggregate", headers=service.headers(),
                      timeout=60).status_code == 200
    got = httpx.get(f"{service.url}/v1/jobs/{job_id}", headers=service.headers(), timeout=30)
    assert got.status_code == 200, got.text
    return got.json()


def test_a_failed_and_resumed_fit_is_measured_like_its_own_clock(service, tmp_path) -> None:
    job_id = f"pl-{uuid.uuid4().hex[:8]}"
    first = fit(service, job_id, 0, tmp_path, fail_at=150)
    # Checkpoints at steps 60 and 120; resume from the last one.
    resume = sorted(tmp_path.glob("*step=120*.ckpt"))
    assert resume, sorted(p.name for p in tmp_path.iterdir())
    second = fit(service, job_id, 1, tmp_path, fail_at=None, resume=str(resume[0]))
    result = job_result(service, job_id)
    check(result, expected([first, second]))
    assert len(result["attempts"]) == 2 and result["state"] == "completed"
    assert result["level1"]["nof_by_cause"]["user"] == 1
    assert result["components"]["compilation"] > 0
    assert result["components"]["wasted_training"] > result["phases"]["lost_progress"] > 0


def test_async_checkpoint_saves_are_staged_then_durable_when_written(service, tmp_path) -> None:
    job_id = f"pl-async-{uuid.uuid4().hex[:8]}"
    only = fit(service, job_id, 0, tmp_path, fail_at=None, plugins=[AsyncCheckpointIO()])
    result = job_result(service, job_id)
    check(result, expected([only]))
    # Each of the 5 saves (steps 60 ... 300): staged in the foreground, written in the
    # background on the plugin's thread, durable once written, all before the release.
    assert len(list(tmp_path.glob("*.ckpt"))) == 5 and result["state"] == "completed"
    engine = make_engine(service.database_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text(
                "SELECT type, ts, attrs FROM events WHERE job_id = :j AND (type IN"
                " ('checkpoint', 'released') OR phase = 'checkpoint_save') ORDER BY ts"),
                {"j": job_id}).all()
    finally:
        engine.dispose()
    starts = [bool((r.attrs or {}).get("background")) for r in rows if r.type == "phase_start"]
    assert sorted(starts) == [False] * 5 + [True] * 5
    checkpoints = [r for r in rows if r.type == "checkpoint"]
    assert len(checkpoints) == 5 and rows[-1].type == "released"
    assert all(r.attrs["snapshot_ts"] < r.ts.isoformat() for r in checkpoints)
