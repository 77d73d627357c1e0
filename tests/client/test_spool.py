"""The durable spool: files, ownership by flock, leftovers, and a killed process losing nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from ett_client.spool import FileSpool, MemorySpool

from tests.client.fake_service import FakeService, refused_url, wait_for

REPO = Path(__file__).resolve().parents[2]


def _lines(n: int, start: int = 0) -> list[bytes]:
    return [json.dumps({"n": i}).encode() + b"\n" for i in range(start, start + n)]


def test_batches_come_out_in_order_and_answered_segments_are_deleted(tmp_path: Path):
    spool = FileSpool(str(tmp_path), max_bytes=1 << 20)
    assert spool.append(_lines(5)) == 5
    batch = spool.next_batch(max_events=3, max_bytes=1 << 20)
    assert [json.loads(x)["n"] for x in batch.lines] == [0, 1, 2]
    spool.resolve(batch)
    batch = spool.next_batch(max_events=3, max_bytes=1 << 20)
    assert [json.loads(x)["n"] for x in batch.lines] == [3, 4]
    assert len(list(tmp_path.glob("ett-*.jsonl"))) == 1
    spool.resolve(batch)
    assert spool.next_batch(3, 1 << 20) is None
    assert list(tmp_path.glob("ett-*.jsonl")) == []
    assert spool.append(_lines(1)) == 1  # a new segment after the old one was deleted
    assert len(list(tmp_path.glob("ett-*.jsonl"))) == 1
    spool.close()


def test_batches_respect_the_byte_limit(tmp_path: Path):
    spool = FileSpool(str(tmp_path), max_bytes=1 << 20)
    spool.append(_lines(10))
    batch = spool.next_batch(max_events=100, max_bytes=25)
    assert len(batch.lines) == 2
    spool.close()


def test_a_full_spool_refuses_new_lines(tmp_path: Path):
    spool = FileSpool(str(tmp_path), max_bytes=30)
    assert spool.append(_lines(5)) == 3
    spool.close()


def test_a_live_spools_files_cannot_be_adopted_but_a_closed_ones_can(tmp_path: Path):
    owner = FileSpool(str(tmp_path), max_bytes=1 << 20)
    owner.append(_lines(4))
    other = FileSpool(str(tmp_path), max_bytes=1 << 20)
    assert other.adopt_leftovers() == 0
    owner.close()  # files stay, locks go: as when the owner process dies
    assert other.adopt_leftovers() > 0
    batch = other.next_batch(100, 1 << 20)
    assert not batch.own and len(batch.lines) == 4
    other.resolve(batch)
    assert list(tmp_path.glob("ett-*.jsonl")) == []
    other.close()


def test_a_torn_last_line_is_skipped(tmp_path: Path):
    (tmp_path / "ett-h-1-dead-000000.jsonl").write_bytes(b'{"n":0}\n{"n":1}\n{"n":')
    spool = FileSpool(str(tmp_path), max_bytes=1 << 20)
    spool.adopt_leftovers()
    batch = spool.next_batch(100, 1 << 20)
    assert len(batch.lines) == 2
    spool.resolve(batch)
    assert spool.next_batch(100, 1 << 20) is None
    assert list(tmp_path.glob("ett-*.jsonl")) == []
    spool.close()


def test_memory_spool_has_the_same_behaviour():
    spool = MemorySpool(max_bytes=1 << 20)
    spool.append(_lines(5))
    batch = spool.next_batch(3, 1 << 20)
    assert len(batch.lines) == 3
    spool.resolve(batch)
    assert len(spool.next_batch(10, 1 << 20).lines) == 2


CHILD = textwrap.dedent("""
    import sys, time
    from ett_client import Recorder
    rec = Recorder(url=sys.argv[1], token="t", job_id="job-k", model="m", gpus=2,
                   spool_dir=sys.argv[2], install_hooks=False, spool_interval_s=0.01)
    rec.allocated()
    for step in range(200):
        rec.heartbeat(step=step)
    while rec.stats()["spooled"] < 201:
        time.sleep(0.01)
    print("spooled", flush=True)
    time.sleep(60)
""")


def test_a_killed_process_loses_nothing_and_the_next_recorder_sends_it_once(
        fake: FakeService, make_recorder, tmp_path: Path):
    spool_dir = tmp_path / "spool"
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'client'}"}
    env.pop("RANK", None)
    child = subprocess.Popen([sys.executable, "-c", CHILD, refused_url(), str(spool_dir)],
                             stdout=subprocess.PIPE, env=env, text=True)
    try:
        assert child.stdout.readline().strip() == "spooled"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert list(spool_dir.glob("ett-*.jsonl"))
    rec = make_recorder(fake.url, spool_dir=str(spool_dir))
    assert wait_for(lambda: len(fake.events()) == 201, 10)
    assert sorted(e["attrs"]["step"] for e in fake.events() if e["type"] == "heartbeat") == list(
        range(200))
    assert len(fake.deliveries) == len(set(fake.deliveries)) == 201  # each sent exactly once
    assert wait_for(lambda: not list(spool_dir.glob("ett-*.jsonl")), 5)
    assert rec.stats()["enqueued"] == 0  # leftovers are not this recorder's own events


def test_two_live_recorders_never_send_each_others_files(fake, make_recorder, tmp_path):
    spool_dir = str(tmp_path / "shared")
    a = make_recorder(refused_url(), spool_dir=spool_dir, rescan_interval_s=0.05)
    for _ in range(20):
        a.heartbeat()
    assert wait_for(lambda: a.stats()["spooled"] == 20, 5)
    make_recorder(fake.url, spool_dir=spool_dir, rescan_interval_s=0.05)
    assert not wait_for(lambda: fake.events(), 0.5)
