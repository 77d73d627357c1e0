"""A trainer for the real Slurm test, run by sbatch: the SDK with no job id, attempt or model
given (under Slurm it takes the scheduler's), a short start-up, then training with a
heartbeat a second. Writes `<marks>/<job>.<attempt>.training` (its pid) once training.

    trainer.py MARKS TRAIN_SECONDS [HANG_AFTER_SECONDS]

TRAIN_SECONDS < 0 trains until stopped; HANG_AFTER_SECONDS stops the heartbeats (a hung
trainer, silent) while the process stays alive.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from ett_client import Recorder


def main() -> None:
    marks, train_s = Path(sys.argv[1]), float(sys.argv[2])
    hang_after = float(sys.argv[3]) if len(sys.argv) > 3 else None
    rec = Recorder(strict=True)
    rec.allocated(gpus=8)
    with rec.phase("launcher_init"):
        time.sleep(1)
    rec.start_phase("training")
    rec.flush(timeout=10)
    attempt = os.environ.get("SLURM_RESTART_COUNT", "0")
    (marks / f"{os.environ['SLURM_JOB_ID']}.{attempt}.training").write_text(str(os.getpid()))
    started = time.monotonic()
    while train_s < 0 or time.monotonic() - started < train_s:
        time.sleep(1)
        if hang_after is not None and time.monotonic() - started > hang_after:
            rec.flush(timeout=10)
            (marks / f"{os.environ['SLURM_JOB_ID']}.hung").write_text(str(os.getpid()))
            while True:
                time.sleep(60)
        rec.heartbeat()
    rec.end_phase("training")
    rec.released("completed")
    rec.close()


if __name__ == "__main__":
    main()
