"""The trainer integrations: optional (the core imports no framework), and recording on
global rank 0 only: on any other rank they build no recorder (so send nothing), whatever
hooks the real trainer objects call."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_the_core_and_the_integrations_package_import_no_framework() -> None:
    probe = ("import sys, ett_client, ett_client.integrations, ett_client.recorder; "
             "print(sorted({m.split('.')[0] for m in sys.modules} & "
             "{'torch', 'lightning', 'transformers', 'numpy', 'fastapi', 'sqlalchemy'}))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.slow  # importing Lightning alone takes seconds
def test_the_lightning_callback_records_nothing_on_rank_1(monkeypatch, tmp_path) -> None:
    pl = pytest.importorskip("lightning.pytorch")
    from ett_client.integrations.lightning import EttCallback

    # What torchrun gives the second worker: Lightning reads its rank from these.
    for name, value in {"RANK": "1", "LOCAL_RANK": "1", "GROUP_RANK": "0", "WORLD_SIZE": "2",
                        "LOCAL_WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "t",
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29511"}.items():
        monkeypatch.setenv(name, value)
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False,
                         enable_progress_bar=False, default_root_dir=tmp_path)
    assert trainer.global_rank == 1
    ett = EttCallback(url="http://127.0.0.1:9", token="t", job_id="j", model="m",
                      spool_dir=str(tmp_path), install_hooks=False, strict=True)
    module = pl.LightningModule()
    ett.setup(trainer, module, "fit")
    ett.on_train_batch_start(trainer, module, None, 0)
    ett.teardown(trainer, module, "fit")
    assert ett.recorder is None
    assert type(trainer.strategy.checkpoint_io).__name__ == "TorchCheckpointIO"


def test_the_transformers_callback_records_nothing_off_process_zero(tmp_path) -> None:
    transformers = pytest.importorskip("transformers")
    from ett_client.integrations.transformers import EttCallback

    args = transformers.TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[])
    state = transformers.TrainerState(is_world_process_zero=False)
    control = transformers.TrainerControl()
    ett = EttCallback(url="http://127.0.0.1:9", token="t", job_id="j", model="m",
                      spool_dir=str(tmp_path), install_hooks=False, strict=True)
    for hook in (ett.on_init_end, ett.on_train_begin, ett.on_step_begin, ett.on_step_end,
                 ett.on_evaluate, ett.on_save, ett.on_train_end):
        hook(args, state, control)
    assert ett.recorder is None
