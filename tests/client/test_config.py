from __future__ import annotations

import pytest
from ett_client.config import ConfigurationError, default_spool_dir, resolve, resolve_attempt

BASE = dict(url="http://x", token=None, job_id="j", model="m", attempt=None, gpus=None, team=None,
            spool_dir=None, all_ranks=False, strict=None, sigterm_cause=None, tuning={})


def test_attempt_prefers_ett_then_torchelastic_then_slurm():
    assert resolve_attempt({}) == 0
    assert resolve_attempt({"SLURM_RESTART_COUNT": "2"}) == 2
    assert resolve_attempt({"SLURM_RESTART_COUNT": "2", "TORCHELASTIC_RESTART_COUNT": "1"}) == 1
    assert resolve_attempt({"ETT_ATTEMPT": "5", "TORCHELASTIC_RESTART_COUNT": "1"}) == 5


def test_gpus_default_to_world_size_and_rank_is_read():
    s = resolve(**BASE, env={"WORLD_SIZE": "4", "RANK": "1", "HOME": "/h"})
    assert (s.gpus, s.rank, s.enabled) == (4, 1, False)
    assert resolve(**BASE, env={"ETT_GPUS": "8", "WORLD_SIZE": "4", "HOME": "/h"}).gpus == 8


def test_the_default_spool_is_per_job_under_the_cache():
    assert default_spool_dir("a/b:c", {"XDG_CACHE_HOME": "/c"}) == "/c/ett-client/spool/a_b_c"


@pytest.mark.parametrize("change", [{"url": None}, {"url": "ftp://x"}, {"job_id": "a b"},
                                    {"model": ""}, {"gpus": 0}, {"sigterm_cause": "meteor"}])
def test_bad_settings_are_configuration_errors(change):
    with pytest.raises(ConfigurationError):
        resolve(**{**BASE, **change}, env={"HOME": "/h"})


def test_under_slurm_the_job_and_attempt_are_the_schedulers_unless_set():
    slurm = {"SLURM_JOB_ID": "42", "SLURM_CLUSTER_NAME": "gpu-a", "SLURM_JOB_NAME": "llama run",
             "SLURM_RESTART_COUNT": "1", "TORCHELASTIC_RESTART_COUNT": "0", "HOME": "/h"}
    unset = {**BASE, "job_id": None, "model": None}
    s = resolve(**unset, env=slurm)
    assert (s.job_id, s.attempt, s.model) == ("slurm:gpu-a:42", 1, "llama_run")
    assert resolve(**unset, env={**slurm, "ETT_ATTEMPT": "0"}).attempt == 0
    assert resolve(**unset, env={**slurm, "ETT_MODEL": "llama-70b"}).model == "llama-70b"
    own = resolve(**BASE, env=slurm)  # a trainer that names its job keeps its own counting
    assert (own.job_id, own.attempt, own.model) == ("j", 0, "m")
    first_run = {k: v for k, v in slurm.items() if k != "SLURM_RESTART_COUNT"}
    assert resolve(**unset, env=first_run).attempt == 0


def test_under_slurm_a_sigterm_is_left_to_the_scheduler_unless_a_cause_is_set():
    slurm = {"SLURM_JOB_ID": "42", "SLURM_CLUSTER_NAME": "gpu-a", "HOME": "/h"}
    unset = {**BASE, "job_id": None, "model": "m"}
    assert resolve(**unset, env=slurm).sigterm_reports_failure is False
    assert resolve(**unset, env={**slurm, "ETT_SIGTERM_CAUSE": "infra"}).sigterm_reports_failure
    assert resolve(**BASE, env=slurm).sigterm_reports_failure is True
