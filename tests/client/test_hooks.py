"""Process hooks, in child processes: uncaught exceptions, SIGTERM, exit, fork."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.client.fake_service import FakeService

REPO = Path(__file__).resolve().parents[2]
# The children import this checkout's SDK, not whichever one the interpreter has installed.
CHILD_PATH = f"{REPO}{os.pathsep}{REPO / 'client'}"

PRELUDE = """
import os, signal, sys, threading, time
from ett_client import Recorder
rec = Recorder(url=sys.argv[1], token="t", job_id="job-h", model="m", gpus=1,
               spool_dir=sys.argv[2], send_interval_s=0.05, spool_interval_s=0.005)
rec.allocated()
"""


def run_child(fake: FakeService, tmp_path: Path, body: str, *, wait: bool = True,
              timeout_s: float = 20) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": CHILD_PATH}
    for name in ("RANK", "ETT_STRICT", "ETT_SIGTERM_CAUSE"):
        env.pop(name, None)
    proc = subprocess.Popen(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(body), fake.url, str(tmp_path / "sp")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    if wait:
        proc.wait(timeout_s)
    return proc


def failures(fake: FakeService) -> list[dict]:
    return [e for e in fake.events() if e["type"] == "failure"]


def test_an_uncaught_exception_records_a_user_failure_and_keeps_the_traceback(fake, tmp_path):
    proc = run_child(fake, tmp_path, "raise RuntimeError('loss is nan')")
    assert proc.returncode == 1
    assert "RuntimeError: loss is nan" in proc.stderr.read()  # the previous hook still ran
    (failure,) = failures(fake)
    assert failure["attrs"] == {"cause": "user", "reason": "uncaught RuntimeError: loss is nan"}


def test_an_uncaught_exception_in_a_thread_records_a_user_failure(fake, tmp_path):
    proc = run_child(fake, tmp_path, """
        def work():
            raise ValueError("bad shard")
        t = threading.Thread(target=work, name="loader"); t.start(); t.join()
        rec.close(5)
    """)
    assert proc.returncode == 0
    assert "ValueError: bad shard" in proc.stderr.read()
    (failure,) = failures(fake)
    assert failure["attrs"]["reason"] == "uncaught ValueError: bad shard in thread loader"


def test_ctrl_c_is_a_cancellation_not_a_failure(fake, tmp_path):
    run_child(fake, tmp_path, "raise KeyboardInterrupt")
    assert failures(fake) == []
    assert [e["attrs"] for e in fake.events() if e["type"] == "released"] == [
        {"reason": "cancelled"}]


def test_sigterm_records_a_preemption_and_then_dies_of_sigterm(fake, tmp_path):
    proc = run_child(fake, tmp_path, """
        print("ready", flush=True)
        time.sleep(30)
    """, wait=False)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == -signal.SIGTERM
    (failure,) = failures(fake)
    assert failure["attrs"] == {"cause": "preemption", "reason": "SIGTERM"}


def test_sigterm_chains_to_an_existing_handler_and_the_cause_is_configurable(fake, tmp_path):
    body = """
        print("ready", flush=True)
        time.sleep(30)
    """
    prelude_handler = (
        "import signal, sys\n"
        "def mine(signum, frame):\n"
        "    print('mine ran', flush=True); sys.exit(3)\n"
        "signal.signal(signal.SIGTERM, mine)\n"
    )
    env = {**os.environ, "PYTHONPATH": CHILD_PATH, "ETT_SIGTERM_CAUSE": "infra"}
    env.pop("RANK", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", prelude_handler + PRELUDE + textwrap.dedent(body), fake.url,
         str(tmp_path / "sp")], stdout=subprocess.PIPE, env=env, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 3
    assert "mine ran" in proc.stdout.read()
    assert failures(fake)[0]["attrs"]["cause"] == "infra"


def test_sigterm_after_an_explicit_failure_still_flushes_it(fake, tmp_path):
    # The example trainer's race under load: it records the failure of a collective itself,
    # and torchelastic's SIGTERM kills it before the spool thread has taken the event from
    # the ring. A spool thread that never wakes on its own makes that window certain.
    env = {**os.environ, "PYTHONPATH": CHILD_PATH}
    for name in ("RANK", "ETT_STRICT", "ETT_SIGTERM_CAUSE"):
        env.pop(name, None)
    child = textwrap.dedent("""
        import sys, time
        from ett_client import Recorder
        rec = Recorder(url=sys.argv[1], token="t", job_id="job-h", model="m", gpus=1,
                       spool_dir=sys.argv[2], spool_interval_s=3600, send_interval_s=3600,
                       exit_timeout_s=10)
        rec.allocated()
        rec.failure(cause="infra", reason="collective failed")
        print("ready", flush=True)
        time.sleep(30)
    """)
    proc = subprocess.Popen([sys.executable, "-c", child, fake.url, str(tmp_path / "sp")],
                            stdout=subprocess.PIPE, env=env, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == -signal.SIGTERM
    assert [e["type"] for e in fake.events()] == ["allocated", "failure"]  # no second one
    assert failures(fake)[0]["attrs"] == {"cause": "infra", "reason": "collective failed"}


def test_sigterm_with_an_unreachable_service_still_dies_within_the_bound(tmp_path):
    from tests.client.fake_service import refused_url

    class Down:
        url = refused_url()

    proc = run_child(Down, tmp_path, """
        rec.settings.__class__  # noqa
        print("ready", flush=True)
        time.sleep(30)
    """, wait=False)
    assert proc.stdout.readline().strip() == "ready"
    import time

    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == -signal.SIGTERM
    assert time.monotonic() - start < 3.0 + 1.5  # exit_timeout_s defaults to 3 s
    assert list((tmp_path / "sp").glob("ett-*.jsonl"))  # the failure waits there


def test_close_runs_at_exit(fake, tmp_path):
    proc = run_child(fake, tmp_path, """
        rec.released(reason="completed")
    """)
    assert proc.returncode == 0
    assert {e["type"] for e in fake.events()} == {"allocated", "released"}


def test_the_worker_is_rebuilt_in_a_forked_child(fake, tmp_path):
    proc = run_child(fake, tmp_path, """
        assert rec.flush(5)
        pid = os.fork()
        if pid == 0:
            rec.heartbeat(step=1)
            ok = rec.flush(5)
            os._exit(0 if ok and rec.stats()["acknowledged"] == 1 else 7)
        _, status = os.waitpid(pid, 0)
        rec.heartbeat(step=2)
        assert rec.flush(5)
        sys.exit(os.waitstatus_to_exitcode(status))
    """)
    assert proc.returncode == 0, proc.stderr.read()
    steps = sorted(e["attrs"]["step"] for e in fake.events() if e["type"] == "heartbeat")
    assert steps == [1, 2]
    assert len(fake.deliveries) == len(set(fake.deliveries))
