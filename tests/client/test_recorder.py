"""The Recorder against a scripted service: delivery, retries, drops, deadlines, ranks, strict."""

from __future__ import annotations

import itertools
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from ett_client import EttClientError, InvalidEventError, Recorder

from tests.client.fake_service import FakeService, Reply, blackhole, refused_url, wait_for


def test_recorded_events_arrive_in_order_with_ids_and_fields(fake: FakeService, make_recorder):
    rec = make_recorder(fake.url, team="team-x")
    rec.allocated()
    with rec.phase("compilation"):
        pass
    with rec.phase("training"), rec.phase("checkpoint_save"):
        rec.checkpoint(snapshot_ts=datetime(2026, 1, 1, tzinfo=UTC), step=7)
    rec.heartbeat(step=8)
    rec.failure(cause="infra", reason="xid 79")
    rec.released(reason="failed")
    assert rec.flush(timeout=5)
    events = sorted(fake.events(), key=lambda e: e["ts"])
    assert [e["type"] for e in events] == [
        "allocated", "phase_start", "phase_end", "phase_start", "phase_start", "checkpoint",
        "phase_end", "phase_end", "heartbeat", "failure", "released"]
    assert events[0]["gpus"] == 8
    assert all(e["job_id"] == "job-1" and e["model"] == "model-a" and e["attempt"] == 0
               and e["team"] == "team-x" and "rank" not in e for e in events)
    assert all(uuid.UUID(e["event_id"]).version == 4 for e in events)
    assert all(e["ts"].endswith("Z") and len(e["ts"]) == 27 for e in events)
    assert [e["ts"] for e in events] == sorted(e["ts"] for e in events)
    checkpoint = events[5]
    assert checkpoint["attrs"] == {"snapshot_ts": "2026-01-01T00:00:00.000000Z", "step": 7}
    assert events[9]["attrs"] == {"cause": "infra", "reason": "xid 79"}
    assert events[10]["attrs"] == {"reason": "failed"}
    stats = rec.stats()
    assert stats["enqueued"] == stats["spooled"] == stats["acknowledged"] == 11
    assert stats["pending"] == 0


def test_background_phase_is_marked(fake: FakeService, make_recorder):
    rec = make_recorder(fake.url)
    with rec.phase("checkpoint_upload", background=True):
        pass
    assert rec.flush(5)
    start = next(e for e in fake.events() if e["type"] == "phase_start")
    assert start["attrs"] == {"background": True}


def test_503_and_connection_errors_are_retried_with_the_same_event_ids(fake, make_recorder):
    fake.script = [Reply(503), Reply(502), Reply(500), Reply(504)]
    rec = make_recorder(fake.url)
    rec.heartbeat()
    assert rec.flush(timeout=5)
    ids = {e["event_id"] for _, _, events in fake.requests for e in events}
    assert len(fake.requests) == 5 and len(ids) == 1
    assert rec.stats()["retries"] == 4
    assert rec.stats()["acknowledged"] == 1


def test_retry_after_is_honoured_over_the_backoff(fake: FakeService, make_recorder):
    fake.script = [Reply(429, headers={"Retry-After": "0.6"})]
    rec = make_recorder(fake.url)
    rec.heartbeat()
    assert rec.flush(timeout=5)
    (t0, s0, _), (t1, s1, _) = fake.requests
    assert (s0, s1) == (429, 202)
    assert t1 - t0 >= 0.55  # the backoff alone would be at most 0.02 s


def test_backoff_grows_between_retries(fake: FakeService, make_recorder):
    fake.script = [Reply(503)] * 4
    rec = make_recorder(fake.url, backoff_base_s=0.05, backoff_max_s=10.0)
    rec.heartbeat()
    assert rec.flush(timeout=10)
    times = [t for t, _, _ in fake.requests]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # uniform in [0, d] for d = 0.05, 0.1, 0.2, 0.4: each gap within its growing bound
    # (the spread itself is test_transport's)
    assert len(gaps) == 4 and all(g <= d + 0.05 for g, d in zip(gaps, (0.05, 0.1, 0.2, 0.4),
                                                                  strict=True))


def test_a_batch_refused_with_4xx_is_dropped_and_counted_not_retried(fake, make_recorder):
    fake.script = [Reply(422)]
    rec = make_recorder(fake.url)
    rec.heartbeat()
    rec.heartbeat()
    assert rec.flush(timeout=5)
    assert len(fake.requests) == 1
    assert rec.stats()["rejected"] == 2 and rec.stats()["retries"] == 0
    rec.heartbeat()
    assert rec.flush(timeout=5)
    assert rec.stats()["acknowledged"] == 1


def test_per_event_rejections_are_counted_and_not_retried(fake, make_recorder):
    fake.script = [Reply(202, reject_indexes=(1,))]
    rec = make_recorder(fake.url, send_interval_s=0.3)
    for _ in range(3):
        rec.heartbeat()
    assert rec.flush(timeout=5)
    assert len(fake.requests) == 1
    assert rec.stats()["acknowledged"] == 2 and rec.stats()["rejected"] == 1


def test_duplicates_are_counted(fake: FakeService, make_recorder):
    rec = make_recorder(fake.url)
    rec.heartbeat()
    assert rec.flush(5)
    # Replay the same batch, as a retry after a lost response would.
    _, _, events = fake.requests[0]
    fake.stored[events[0]["event_id"]] = events[0]
    rec2 = make_recorder(fake.url, spool_dir=":memory:")
    rec2._pipeline.spool.append([__import__("json").dumps(events[0]).encode() + b"\n"])
    rec2._pipeline.spooler.spooled += 1
    assert rec2.flush(5)
    assert rec2.stats()["duplicates"] == 1


def test_full_queue_drops_the_oldest_and_counts(make_recorder, caplog):
    with blackhole() as url:
        rec = make_recorder(url, max_queue=10, spool_interval_s=60.0)
        for step in range(25):
            rec.heartbeat(step=step)
        assert rec.stats()["dropped"] == 15
        assert [r[4]["step"] for r in rec._ring] == list(range(15, 25))
        assert sum("queue is full" in r.getMessage() for r in caplog.records) == 1


def test_calls_do_not_block_when_the_service_is_blackholed(make_recorder):
    with blackhole() as url:
        rec = make_recorder(url, request_timeout_s=30.0)
        rec.heartbeat()
        time.sleep(0.2)  # the sender is now stuck in a request that never returns
        start = time.perf_counter()
        for _ in range(1000):
            rec.heartbeat()
        assert time.perf_counter() - start < 0.2
        assert wait_for(lambda: rec.stats()["spooled"] == 1001, 5)


def test_flush_and_close_honour_their_deadline_when_the_service_is_down(make_recorder):
    rec = make_recorder(refused_url())
    rec.allocated()
    start = time.monotonic()
    assert rec.flush(timeout=0.3) is False
    assert 0.25 <= time.monotonic() - start < 1.0
    start = time.monotonic()
    assert rec.close(timeout=0.3) is False
    assert time.monotonic() - start < 1.0
    assert rec.stats()["spooled"] == 1 and rec.stats()["retries"] >= 1


def test_close_honours_its_deadline_when_the_service_is_blackholed(make_recorder):
    with blackhole() as url:
        rec = make_recorder(url, request_timeout_s=30.0)
        rec.allocated()
        start = time.monotonic()
        assert rec.close(timeout=0.5) is False
        assert time.monotonic() - start < 1.5


def test_events_recorded_during_an_outage_arrive_once_it_ends(fake: FakeService, make_recorder):
    fake.script = [Reply(503)] * 5
    rec = make_recorder(fake.url)
    for step in range(50):
        rec.heartbeat(step=step)
    assert rec.flush(timeout=10)
    assert sorted(e["attrs"]["step"] for e in fake.events()) == list(range(50))


def test_close_is_idempotent_and_later_calls_are_no_ops(fake: FakeService, make_recorder):
    rec = make_recorder(fake.url)
    rec.allocated()
    assert rec.close(timeout=5) and rec.close(timeout=5)
    rec.heartbeat()
    assert rec.stats()["enqueued"] == 1 and not rec.enabled


def test_only_rank_zero_records_by_default(fake, make_recorder, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    rec = make_recorder(fake.url)
    assert not rec.enabled
    rec.allocated()
    with rec.phase("training"):
        pass
    assert rec.flush(1) and rec.stats()["enqueued"] == 0


def test_all_ranks_records_with_the_rank(fake, make_recorder, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    rec = make_recorder(fake.url, all_ranks=True)
    rec.heartbeat()
    assert rec.flush(5)
    assert fake.events()[0]["rank"] == 3


def test_attempt_comes_from_torchelastic_then_slurm(fake, make_recorder, monkeypatch):
    monkeypatch.setenv("SLURM_RESTART_COUNT", "4")
    assert make_recorder(fake.url).settings.attempt == 4
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    assert make_recorder(fake.url).settings.attempt == 2
    assert make_recorder(fake.url, attempt=9).settings.attempt == 9


def test_invalid_calls_are_counted_and_never_raise(fake: FakeService, make_recorder):
    rec = make_recorder(fake.url)
    rec.failure(cause="cosmic-rays")
    rec.released(reason="bored")
    rec.start_phase("bad phase name")
    rec.checkpoint(snapshot_ts="yesterday")  # type: ignore[arg-type]
    rec.heartbeat(step=-1)
    assert rec.stats()["rejected"] == 5 and rec.stats()["enqueued"] == 0


def test_strict_mode_raises_the_one_base_class(fake: FakeService, make_recorder):
    rec = make_recorder(fake.url, strict=True)
    with pytest.raises(InvalidEventError):
        rec.failure(cause="cosmic-rays")
    with pytest.raises(EttClientError):
        rec.checkpoint(snapshot_ts="yesterday")  # type: ignore[arg-type]
    with pytest.raises(EttClientError):
        Recorder(url="ftp://x", job_id="j", model="m", strict=True)


def test_strict_mode_from_the_environment(fake, make_recorder, monkeypatch):
    monkeypatch.setenv("ETT_STRICT", "1")
    with pytest.raises(EttClientError):
        Recorder(job_id="j", model="m")  # no URL


def test_a_misconfigured_recorder_is_a_silent_no_op(monkeypatch):
    monkeypatch.delenv("ETT_URL", raising=False)
    monkeypatch.delenv("ETT_STRICT", raising=False)
    rec = Recorder(job_id="has spaces", model="m", install_hooks=False)
    assert not rec.enabled
    rec.allocated()
    with rec.phase("training"):
        rec.checkpoint(step=1)
    assert rec.flush(0.1) and rec.close(0.1) and rec.stats()["enqueued"] == 0


def test_an_internal_error_is_swallowed_outside_strict_mode(fake, make_recorder):
    rec = make_recorder(fake.url)
    rec._ring = None  # break the hot path
    rec.heartbeat()  # must not raise
    rec_strict = make_recorder(fake.url, strict=True)
    rec_strict._ring = None
    with pytest.raises(EttClientError):
        rec_strict.heartbeat()


def test_env_fallbacks_configure_the_recorder(fake, monkeypatch, tmp_path: Path):
    for name, value in {"ETT_URL": fake.url, "ETT_TOKEN": "tok", "ETT_JOB_ID": "env-job",
                        "ETT_MODEL": "env-model", "ETT_GPUS": "4", "ETT_TEAM": "env-team",
                        "ETT_SPOOL_DIR": str(tmp_path / "s")}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("RANK", raising=False)
    rec = Recorder(install_hooks=False, send_interval_s=0.02)
    try:
        rec.allocated()
        assert rec.flush(5)
        (event,) = fake.events()
        assert (event["job_id"], event["model"], event["gpus"], event["team"]) == (
            "env-job", "env-model", 4, "env-team")
        assert (tmp_path / "s").is_dir()
    finally:
        rec.close(1)


def test_an_idle_recorder_leaves_no_spool_files(fake: FakeService, make_recorder, tmp_path):
    rec = make_recorder(fake.url)
    for _ in range(10):
        rec.heartbeat()
    assert rec.flush(5)
    assert wait_for(lambda: not list((tmp_path / "spool").glob("*.jsonl")), 2)


def test_labels_ride_on_allocated_and_bad_ones_are_refused_in_the_trainer(fake: FakeService,
                                                                         make_recorder):
    rec = make_recorder(fake.url)
    rec.allocated(labels={"variant": "optimized", "experiment": "pt2-cache"})
    assert rec.flush(5)
    [alloc] = [e for e in fake.events() if e["type"] == "allocated"]
    assert alloc["attrs"] == {"labels": {"variant": "optimized", "experiment": "pt2-cache"}}
    strict = make_recorder(fake.url, strict=True)
    for bad, message in (({"Variant": "x"}, "label key 'Variant'"),
                         ({"v": 1}, "label 'v' must be a string"),
                         ({f"k{i}": "x" for i in range(17)}, "at most 16 pairs")):
        with pytest.raises(InvalidEventError, match=message):
            strict.allocated(labels=bad)  # type: ignore[arg-type]


def test_labels_reach_the_job_on_the_real_service(service, make_recorder):
    import httpx

    job = f"sdk-labels-{uuid.uuid4().hex[:8]}"
    rec = make_recorder(service.url, job_id=job, token=service.token)
    rec.allocated(labels={"variant": "baseline"})
    with rec.phase("training"):
        pass
    rec.released()
    assert rec.flush(10)
    headers = {"Authorization": f"Bearer {service.token}"}
    httpx.post(service.url + "/v1/aggregate", headers=headers, timeout=60).raise_for_status()
    got = httpx.get(f"{service.url}/v1/jobs/{job}", headers=headers, timeout=30).json()
    assert got["labels"] == {"variant": "baseline"}
