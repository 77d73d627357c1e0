"""A tiny data-parallel PyTorch training job instrumented with ett_client (CPU, gloo).

After `make trainer` (a CPU-only PyTorch into .venv), run it under torchelastic, which
restarts it after a failure:

    ETT_URL=http://127.0.0.1:8080 ETT_TOKEN=$(cat .ett-data/admin-token) \\
    ETT_JOB_ID=demo-1 ETT_MODEL=tiny-mlp ETT_TEAM=ml-platform ETT_SIGTERM_CAUSE=infra \\
    .venv/bin/torchrun --standalone --nproc-per-node=2 --max-restarts=2 \\
        examples/train_elastic.py --ckpt-dir "$(mktemp -d)" --crash-rank 1 --crash-step 25

``ETT_SIGTERM_CAUSE=infra``: when one worker dies, torchelastic stops the others with
SIGTERM, which the recorder would otherwise report as a ``preemption`` (docs/client.md,
caveats); here the SIGTERM is the consequence of an infra failure. ``ETT_TEAM`` gives the
job its team; without it (and without a taxonomy ``models:`` entry for the model) the job
is billed to the team ``unassigned``.

It uses torch.compile (its compilations become the ``compilation`` phase), asynchronous DCP
checkpoints (the staging is ``checkpoint_save``; the ``checkpoint`` event is sent when the
save is durable) and resumes from its latest checkpoint after a restart. ``--crash-rank`` /
``--crash-step`` make one worker SIGKILL itself in the first attempt, to show a failure and
a recovery. ``--truth FILE`` makes rank 0 log what it did with its own clock (tests compare
that with what the service computed).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from ett_client import Recorder
from ett_client import torch_helpers as ett_torch


class Truth:
    """Rank 0's own record of what happened, with time.time(), one JSON line per fact."""

    def __init__(self, path: str | None, attempt: int) -> None:
        self._file = open(path, "a") if path else None  # noqa: SIM115 - open for the run
        self._attempt = attempt

    def __call__(self, what: str, **fields: object) -> None:
        if self._file is not None:
            line = {"t": time.time(), "what": what, "attempt": self._attempt, **fields}
            self._file.write(json.dumps(line) + "\n")
            self._file.flush()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--step-s", type=float, default=0.1, help="simulated work per step")
    parser.add_argument("--ckpt-every", type=int, default=10)
    parser.add_argument("--ckpt-dir", required=True)
    parser.add_argument("--crash-rank", type=int, default=-1)
    parser.add_argument("--crash-step", type=int, default=-1)
    parser.add_argument("--truth", default=None)
    parser.add_argument("--close-timeout-s", type=float, default=10.0)
    parser.add_argument("--backoff-max-s", type=float, default=30.0)
    args = parser.parse_args()

    attempt = ett_torch.elastic_attempt()
    rank = int(os.environ.get("RANK", "0"))
    truth = Truth(args.truth if rank == 0 else None, attempt)

    rec = Recorder(backoff_max_s=args.backoff_max_s)  # everything else from ETT_* and torchrun
    recorder_on_sigterm = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum: int, frame: object) -> None:
        # Ground truth first: the recorder's handler (chained below) records the failure at
        # this instant and then flushes, which can take seconds while the service is down.
        truth("failure", via="SIGTERM")
        if callable(recorder_on_sigterm):
            recorder_on_sigterm(signum, frame)
        sys.exit(143)

    signal.signal(signal.SIGTERM, on_sigterm)

    rec.allocated()
    truth("allocated")

    def phase(name: str):  # the recorder's phase, mirrored into the truth log
        class Scope:
            def __enter__(self) -> None:
                rec.start_phase(name)
                truth("start", phase=name)

            def __exit__(self, *exc: object) -> None:
                rec.end_phase(name)
                truth("end", phase=name)

        return Scope()

    with phase("process_group_init"):
        # A fresh file store per attempt: with torchelastic's agent store, gloo in this torch
        # can pick up the previous attempt's (dead) peer addresses after a restart.
        run_id = os.environ.get("TORCHELASTIC_RUN_ID", "run")
        store_file = Path(args.ckpt_dir) / f".pg-{run_id}-{attempt}"
        store_file.parent.mkdir(parents=True, exist_ok=True)
        dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank,
                                world_size=int(os.environ.get("WORLD_SIZE", "1")))
        # Async saves run collectives on a background thread: give them their own group so
        # they never interleave with the training loop's all_reduce on the default one.
        ckpt_group = dist.new_group(backend="gloo")
    world = dist.get_world_size()

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = torch.zeros((), dtype=torch.int64)
    state = {"model": model.state_dict(), "step": step}

    latest = Path(args.ckpt_dir) / "latest"
    if latest.exists():
        with phase("checkpoint_load"):
            ett_torch.load(rec, state, checkpoint_id=latest.read_text().strip(),
                           process_group=ckpt_group)
            model.load_state_dict(state["model"])
    start_step = int(state["step"])

    # Compilation time comes from Dynamo's callbacks; mirror it into the truth log too.
    ett_torch.track_compilation(rec)
    from torch._dynamo.callback import callback_handler

    callback_handler.register_start_callback(lambda _a: truth("start", phase="compilation"))
    callback_handler.register_end_callback(lambda _a: truth("end", phase="compilation"))
    compiled = torch.compile(model, backend="aot_eager")

    pending = None
    gen = torch.Generator().manual_seed(rank)
    try:
        with phase("training"):
            for i in range(start_step, args.steps):
                if attempt == 0 and rank == args.crash_rank and i == args.crash_step:
                    os.kill(os.getpid(), signal.SIGKILL)
                x = torch.randn(16, 32, generator=gen)
                loss = compiled(x).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                for p in model.parameters():
                    all_reduce_or_peer_failure(p.grad)
                    p.grad /= world
                opt.step()
                time.sleep(args.step_s)
                rec.heartbeat(step=i + 1)
                if (i + 1) % args.ckpt_every == 0 and i + 1 < args.steps:
                    pending = checkpoint(rec, truth, phase, state, step, i + 1, pending,
                                         args.ckpt_dir, latest, rank, ckpt_group)
    except PeerFailure as exc:
        # A peer died inside a collective: an infrastructure failure, not a bug of ours.
        # (Anything else propagates: the recorder's excepthook records it as cause "user".)
        rec.failure(cause="infra", reason=f"collective failed: {exc}"[:300])
        truth("failure", via="collective", error=repr(exc)[:2000])
        rec.flush(timeout=3)
        return 1

    with phase("final_checkpoint"):
        if pending is not None:
            pending.result()
        step.fill_(args.steps)
        ett_torch.save(rec, state, step=args.steps, process_group=ckpt_group,
                       checkpoint_id=str(Path(args.ckpt_dir) / f"step_{args.steps}"))
        if rank == 0:
            latest.write_text(str(Path(args.ckpt_dir) / f"step_{args.steps}"))
    with phase("teardown"):
        dist.destroy_process_group()
    rec.released(reason="completed")
    truth("released")
    rec.close(timeout=args.close_timeout_s)
    return 0


class PeerFailure(Exception):
    """A collective failed because another worker went away."""


def all_reduce_or_peer_failure(tensor: torch.Tensor) -> None:
    try:
        dist.all_reduce(tensor)
    except RuntimeError as exc:  # gloo raises a plain RuntimeError when a peer dies
        raise PeerFailure(str(exc)) from exc


def checkpoint(rec, truth, phase, state, step, at_step, pending, ckpt_dir, latest, rank, group):
    """Start an async save of step ``at_step``; returns its future."""
    with phase("checkpoint_save"):
        if pending is not None:
            pending.result()  # one save in flight at a time
        step.fill_(at_step)
        path = str(Path(ckpt_dir) / f"step_{at_step}")
        staged_at = time.time()
        future = ett_torch.async_save(rec, state, step=at_step, checkpoint_id=path,
                                      process_group=group)

    def durable(fut: object) -> None:
        if fut.exception() is None:  # type: ignore[attr-defined]
            truth("checkpoint", snapshot=staged_at, step=at_step)
            if rank == 0:
                latest.write_text(path)

    getattr(future, "upload_completion", future).add_done_callback(durable)
    return future


if __name__ == "__main__":
    sys.exit(main())
