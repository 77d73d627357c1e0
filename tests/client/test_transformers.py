"""A real Hugging Face `Trainer.train` on the CPU (a tiny GPT-2 built from a config, nothing
downloaded) with `EttCallback`, against a real `ett serve`, measured like the test's own
clock says."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("transformers")

import torch
from ett_client.integrations.transformers import EttCallback
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from tests.client.trainer_truth import AttemptTruth, check, expected

pytestmark = pytest.mark.slow
FAST = {"send_interval_s": 0.05, "backoff_base_s": 0.05, "backoff_max_s": 0.2,
        "request_timeout_s": 5.0}
STEP_S = 0.01


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 64, (n, 16), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class TimedTrainer(Trainer):
    """The test's own clock around evaluation and checkpoint saving, outside the callbacks."""

    truth: AttemptTruth

    def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        t0 = time.time()
        try:
            return super().evaluate(*args, **kwargs)
        finally:
            self.truth.validations.append((t0, time.time()))

    def _save_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        t0 = time.time()
        try:
            super()._save_checkpoint(*args, **kwargs)
        finally:
            self.truth.saves.append((t0, time.time()))


class Marks(TrainerCallback):
    """Start, first step and end on the test's clock; each step also takes STEP_S longer."""

    def __init__(self, truth: AttemptTruth) -> None:
        self.truth = truth

    def on_init_end(self, args, state, control, **kwargs) -> None:
        self.truth.start = time.time()

    def on_step_begin(self, args, state, control, **kwargs) -> None:
        if not self.truth.first_batch:
            self.truth.first_batch = time.time()
        time.sleep(STEP_S)

    def on_train_end(self, args, state, control, **kwargs) -> None:
        self.truth.end = time.time()


def test_a_trainer_run_is_measured_like_its_own_clock(service, tmp_path: Path) -> None:
    job_id = f"hf-{uuid.uuid4().hex[:8]}"
    truth = AttemptTruth()
    ett = EttCallback(url=service.url, token=service.token, job_id=job_id, model="tiny-gpt2",
                      team="research", attempt=0, spool_dir=str(tmp_path / "spool"),
                      install_hooks=False, **FAST)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64,
                                       n_positions=16))
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=200, per_device_train_batch_size=2,
        save_strategy="steps", save_steps=50, eval_strategy="steps", eval_steps=100,
        per_device_eval_batch_size=2, logging_strategy="no", report_to=[], use_cpu=True,
        disable_tqdm=True, dataloader_num_workers=0, seed=0)
    TimedTrainer.truth = truth
    trainer = TimedTrainer(model=model, args=args, train_dataset=Tokens(400),
                           eval_dataset=Tokens(40), callbacks=[ett, Marks(truth)])
    trainer.train()
    assert ett.recorder is not None and ett.recorder.stats()["rejected"] == 0
    assert len(truth.saves) == 4 and len(truth.validations) == 2
    assert httpx.post(service.url + "/v1/aggregate", headers=service.headers(),
                      timeout=60).status_code == 200
    got = httpx.get(f"{service.url}/v1/jobs/{job_id}", headers=service.headers(), timeout=30)
    assert got.status_code == 200, got.text
    result = got.json()
    check(result, expected([truth]))
    assert result["state"] == "completed" and result["level1"]["nof"] == 0
    assert result["phases"]["checkpoint_save"] > 0
