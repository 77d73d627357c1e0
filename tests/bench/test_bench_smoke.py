"""The benchmark suite runs end to end in its quick mode and writes its results.

Times are never asserted here (they depend on the machine); only that every benchmark
runs, prints its figures and appends a record to bench/results/<name>.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

NAMES = ("engine", "sdk", "ingest_batch", "ingest_single", "ingest_store_trips", "aggregation",
         "reads", "console", "otlp", "advice", "slow_clients", "impact", "ingest_window",
         "loop_stall", "fleet_180d", "small_writers",
         "ingest_retry_batch", "sdk_restart", "aggregate_by_age")


@pytest.mark.slow
def test_quick_benchmarks_run_and_append_a_record_each(tmp_path: Path) -> None:
    env = {**os.environ, "ETT_BENCH_RESULTS_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "bench", "--quick"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    for name in NAMES:
        assert f"== {name} (quick)" in out.stdout
        history = json.loads((tmp_path / f"{name}.json").read_text())
        assert len(history) == 1, name
        last = history[-1]
        assert last["quick"] is True and last["figures"] and last["machine"]["cpus"]


def test_the_suite_lists_every_benchmark() -> None:
    from bench.__main__ import BENCHMARKS

    assert set(BENCHMARKS) == set(NAMES)
