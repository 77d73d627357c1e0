"""A real PyTorch trainer (CPU) for the stall tests: it can hang, or die, on a given step.

Run by tests/client/test_stall_trainer.py through the SDK against `ett serve`: the
recorder (configured from ETT_*) sends heartbeats from its own thread every
ETT_HEARTBEAT_S, carrying the step the loop stored with `rec.step()`. The loop can block
on a FIFO at one step (a hang: the heartbeat thread keeps running), SIGKILL itself at
another, and save its state every few steps without reporting a checkpoint. It logs what
it did, with its own clock, to a truth file.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path

import torch
from ett_client import Recorder


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--step-s", type=float, default=0.05, help="the data loader's pace")
    p.add_argument("--truth", type=Path, required=True)
    p.add_argument("--state", type=Path, required=True, help="where the model is saved")
    p.add_argument("--save-every", type=int, default=0)
    p.add_argument("--hang-at", type=int, default=0)
    p.add_argument("--fifo", type=Path)
    p.add_argument("--die-at", type=int, default=0)
    args = p.parse_args()

    attempt = int(os.environ.get("ETT_ATTEMPT", "0"))

    def log(what: str, **fields: object) -> None:
        with args.truth.open("a") as f:
            f.write(json.dumps({"what": what, "t": time.time(), "attempt": attempt, **fields})
                    + "\n")

    rec = Recorder()
    rec.allocated()
    log("allocated")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    first = 1
    if args.state.exists():
        with rec.phase("checkpoint_load"):
            saved = torch.load(args.state)
            model.load_state_dict(saved["model"])
            opt.load_state_dict(saved["opt"])
            first = saved["step"] + 1
            # The state holds `step` steps done: said at once, it is this attempt's first
            # step, which tells the service the state saved at that step survived.
            rec.step(saved["step"])
            rec.heartbeat(step=saved["step"])
            log("resumed", step=saved["step"])
    with rec.phase("training"):
        log("training")
        for step in range(first, args.steps + 1):
            x = torch.randn(64, 32)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(args.step_s)
            rec.step(step)
            log("step", step=step)
            if args.save_every and step % args.save_every == 0:
                # Saved, and deliberately not reported: no checkpoint event.
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                            "step": step}, args.state)
                log("saved", step=step)
            if step == args.hang_at:
                log("hang_start", step=step)
                with args.fifo.open() as fifo:  # blocks until the test writes
                    fifo.read()
                log("hang_end", step=step)
            if step == args.die_at:
                log("die", step=step)
                os.kill(os.getpid(), signal.SIGKILL)
    rec.released()
    log("released")
    rec.close()


if __name__ == "__main__":
    main()
