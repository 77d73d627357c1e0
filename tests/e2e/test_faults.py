"""Fault injection with real processes: kill -9, a PostgreSQL outage, replicas, overload.

Every test here prints one `FAULT ...` line of figures (run with `-s` to see them);
docs/security.md records a run.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import orjson
import pytest
from sqlalchemy import text

from ett_core import Taxonomy
from service.access import tokens
from service.aggregate import Aggregator
from service.store.engine import EmbeddedPostgres, make_engine, postmaster_pid
from tests.conftest import REPO, ServiceProcess, create_database
from tests.factories import demo_events, post_all, results_state, wipe_results

pytestmark = pytest.mark.slow

OUTAGE_S = 60.0  # the issue: "restart it a minute later"
LOAD_S = 20.0  # the replica test's ingest phase


def now_event(job_id: str, seq: int, model: str = "ads_fault") -> dict:
    return {"event_id": str(uuid.uuid4()), "ts": datetime.now(UTC).isoformat(),
            "job_id": job_id, "attempt": 0, "model": model, "type": "heartbeat",
            "attrs": {"step": seq}}


def count_events(url: str, where: str = "TRUE") -> tuple[int, int]:
    engine = make_engine(url, pool_size=1)
    try:
        with engine.connect() as conn:
            row = conn.execute(text(f"SELECT count(*), count(DISTINCT event_id) FROM events"
                                    f" WHERE {where}")).one()
        return int(row[0]), int(row[1])
    finally:
        engine.dispose()


class Poster(threading.Thread):
    """Posts fresh batches; retries a batch (same event ids) until it gets a 202."""

    def __init__(self, urls: list[str], headers: dict[str, str], job_id: str,
                 batch: int = 50, pace_s: float = 0.0) -> None:
        super().__init__(daemon=True)
        self.urls, self.headers, self.job_id, self.batch = urls, headers, job_id, batch
        self.pace_s = pace_s
        self.stop = threading.Event()
        self.sent_ids: set[str] = set()
        self.acked_ids: set[str] = set()
        self.accepted = self.duplicates = self.retries = 0
        self.statuses: dict[str, int] = {}
        self.max_stall_s = 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported by run_posters
            self.error = exc

    def _run(self) -> None:
        seq = 0
        client = httpx.Client(timeout=30)
        while not self.stop.is_set():
            events = [now_event(self.job_id, seq + i) for i in range(self.batch)]
            seq += self.batch
            self.sent_ids.update(e["event_id"] for e in events)
            body = orjson.dumps({"events": events})
            while True:  # deliver this batch before looking at `stop`
                started = time.monotonic()
                try:
                    r = client.post(random.choice(self.urls) + "/v1/events", content=body,
                                    headers={**self.headers,
                                             "Content-Type": "application/json"})
                    status = str(r.status_code)
                except httpx.HTTPError as exc:
                    r, status = None, type(exc).__name__
                self.max_stall_s = max(self.max_stall_s, time.monotonic() - started)
                self.statuses[status] = self.statuses.get(status, 0) + 1
                if r is not None and r.status_code == 202:
                    answer = r.json()
                    assert answer["rejected"] == [], answer
                    self.accepted += answer["accepted"]
                    self.duplicates += answer["duplicates"]
                    self.acked_ids.update(e["event_id"] for e in events)
                    time.sleep(self.pace_s)
                    break
                assert r is None or r.status_code in (502, 503, 504), r.text
                self.retries += 1
                time.sleep(0.05)
        client.close()


def await_killed_sessions(engine, timeout_s: float = 30.0) -> None:
    """Wait until no other session holds an advisory lock: the backend of a client killed
    with SIGKILL keeps its per-job locks until PostgreSQL notices the client is gone, and a
    pass would skip those jobs as taken by another aggregator."""
    deadline = time.monotonic() + timeout_s
    with engine.connect() as conn:
        while time.monotonic() < deadline and conn.execute(text(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                " AND pid <> pg_backend_pid()")).scalar_one():
            conn.rollback()
            time.sleep(0.1)


def run_posters(posters: list[Poster], seconds: float, during=None) -> None:
    for p in posters:
        p.start()
    if during is not None:
        during()
    else:
        time.sleep(seconds)
    for p in posters:
        p.stop.set()
    for p in posters:
        p.join(timeout=120)
        assert not p.is_alive(), "a poster never got its last batch acknowledged"
        assert p.error is None, p.error


def test_api_killed_mid_batch_loses_no_acknowledged_event_and_stores_none_twice(
        pg_server_url, service_factory) -> None:
    db = create_database(pg_server_url, "ett_kill")
    svc = service_factory(db, args=("--no-aggregator",))
    posters = [Poster([svc.url], svc.headers(), f"kill-{i}") for i in range(4)]
    kills = 0

    def chaos() -> None:
        nonlocal kills
        for _ in range(3):
            time.sleep(1.5)
            svc.stop(signal.SIGKILL)
            kills += 1
            time.sleep(0.3)
            svc.start()
        time.sleep(1.0)

    run_posters(posters, 0, during=chaos)
    sent = set().union(*(p.sent_ids for p in posters))
    acked = set().union(*(p.acked_ids for p in posters))
    stored, distinct = count_events(db)
    accepted = sum(p.accepted for p in posters)
    duplicates = sum(p.duplicates for p in posters)
    print(f"\nFAULT api-kill9: kills={kills} sent={len(sent)} acknowledged={len(acked)}"
          f" stored={stored} accepted={accepted} duplicates_reported={duplicates}"
          f" retries={sum(p.retries for p in posters)}")
    assert kills == 3 and sum(p.retries for p in posters) > 0
    assert acked == sent  # every batch was retried until it got its 202
    assert stored == distinct == len(sent)  # each event exactly once
    # A batch committed just before a kill lost its 202; its retry reports duplicates.
    assert accepted + duplicates == stored


def _record(rec, stop: threading.Event) -> None:
    rec.allocated()
    rec.start_phase("training")
    step = 0
    while not stop.is_set():
        rec.heartbeat(step)
        step += 1
        time.sleep(0.02)
    rec.end_phase("training")
    rec.released("completed")


def test_a_database_outage_loses_nothing_sent_through_the_sdk(service_factory) -> None:
    from ett_client import Recorder

    tmp = Path(tempfile.mkdtemp(prefix="ett-outage-"))
    pg = EmbeddedPostgres(tmp)
    url = pg.start()
    try:
        svc = service_factory(url, args=("--no-aggregator",), extra_env={
            "ETT_DB_POOL_TIMEOUT_S": "2", "ETT_TOKEN_CACHE_TTL_S": "2"})
        engine = make_engine(url, pool_size=1)
        with engine.begin() as conn:
            _, writer = tokens.create_token(conn, "writer", "ads", ["ads_*"])
        engine.dispose()
        stop = threading.Event()
        recorders = [
            Recorder(url=svc.url, token=writer, job_id=f"outage-{i}", model=f"ads_m{i}",
                     team="ads", gpus=8, attempt=0, spool_dir=tmp / f"spool-{i}",
                     install_hooks=False, strict=True, send_interval_s=0.2,
                     backoff_base_s=0.2, backoff_max_s=2.0, request_timeout_s=5.0)
            for i in range(3)
        ]
        workers = [threading.Thread(target=_record, args=(r, stop)) for r in recorders]
        probe = Poster([svc.url], {"Authorization": f"Bearer {writer}"}, "outage-probe",
                       batch=1, pace_s=0.05)
        for w in workers:
            w.start()
        probe.start()
        time.sleep(4)
        ready_codes: list[int] = []
        pg.stop()
        down_at = time.monotonic()
        while time.monotonic() - down_at < OUTAGE_S:
            ready_codes.append(httpx.get(svc.url + "/readyz", timeout=10).status_code)
            time.sleep(1)
        assert pg.start() == url
        time.sleep(4)
        ready_after = httpx.get(svc.url + "/readyz", timeout=10).status_code
        stop.set()
        for w in workers:
            w.join()
        delivered = [r.flush(timeout=60) for r in recorders]
        stats = [r.stats() for r in recorders]
        for r in recorders:
            r.close(timeout=5)
        probe.stop.set()
        probe.join(timeout=60)
        assert probe.error is None, probe.error
        enqueued = sum(s["enqueued"] for s in stats)
        stored, distinct = count_events(url, "job_id LIKE 'outage-%' AND job_id <> "
                                             "'outage-probe'")
        print(f"\nFAULT db-outage: outage_s={OUTAGE_S:.0f} sdk_recorded={enqueued}"
              f" sdk_acknowledged={sum(s['acknowledged'] for s in stats)}"
              f" sdk_duplicates={sum(s['duplicates'] for s in stats)}"
              f" sdk_retries={sum(s['retries'] for s in stats)} stored={stored}"
              f" stored_twice={stored - distinct} probe_statuses={probe.statuses}"
              f" longest_ingest_stall_s={probe.max_stall_s:.3f}"
              f" readyz_during={sorted(set(ready_codes))} readyz_after={ready_after}")
        assert all(delivered), stats
        assert all(s["dropped"] == 0 and s["rejected"] == 0 for s in stats), stats
        assert stored == distinct == enqueued
        assert sum(s["acknowledged"] + s["duplicates"] for s in stats) == enqueued
        assert sum(s["retries"] for s in stats) > 0  # the outage was felt
        assert set(probe.statuses) <= {"202", "503"} and probe.statuses.get("503", 0) > 0
        assert probe.max_stall_s < 5.0  # 503 quickly, never a hang
        assert ready_codes.count(503) >= len(ready_codes) - 2 and ready_after == 200
    finally:
        pg.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def start_aggregator(database_url: str, *args: str, batch_jobs: int = 2
                     ) -> subprocess.Popen[bytes]:
    env = {**os.environ, "ETT_DATABASE_URL": database_url, "ETT_LOG_LEVEL": "warning",
           "ETT_AGGREGATE_BATCH_JOBS": str(batch_jobs)}
    log = tempfile.TemporaryFile()  # noqa: SIM115 (read by the test after the process ends)
    proc = subprocess.Popen([sys.executable, "-m", "service.cli", "aggregate", *args],
                            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    proc.log_file = log  # type: ignore[attr-defined]
    return proc


@pytest.fixture
def aggregators() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Aggregator subprocesses of one test; any still running at the end is killed."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_aggregator_loops_killed_repeatedly_while_events_arrive_equal_an_undisturbed_run(
        api, agg, db_engine, database_url, aggregators) -> None:
    """Extends test_aggregate's single-pass kill: kill -9 of `--loop` amid ingest, 6 times."""
    events = sorted(demo_events(models=10, hours=30, seed=5), key=lambda e: e["ts"])
    slices = [events[i::6] for i in range(6)]
    kills = 0
    rng = random.Random(9)
    for chunk in slices:
        proc = start_aggregator(database_url, "--loop", "--interval", "0.1")
        aggregators.append(proc)
        post_all(api, chunk, size=250)
        time.sleep(rng.uniform(0.3, 1.2))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
    await_killed_sessions(db_engine)
    agg.run_pass()
    interrupted = results_state(db_engine)
    wipe_results(db_engine)
    agg.run_pass(recompute_all=True)
    print(f"\nFAULT aggregator-kill9: kills={kills} events={len(events)}"
          f" jobs={len(interrupted['jobs'])}")
    assert kills == len(slices)
    assert results_state(db_engine) == interrupted


def test_two_replicas_and_two_aggregators_under_load_equal_one_process(
        pg_server_url, service_factory, aggregators) -> None:
    db = create_database(pg_server_url, "ett_replicas")
    replicas = [service_factory(db, args=("--no-aggregator",)) for _ in range(2)]
    aggregators.extend(start_aggregator(db, "--loop", "--interval", "0.3", batch_jobs=3)
                       for _ in range(2))
    events = sorted(demo_events(models=16, hours=48, seed=11), key=lambda e: e["ts"])
    batches = [events[i:i + 50] for i in range(0, len(events), 50)]
    pace_s = LOAD_S * 4 / len(batches)  # spread over LOAD_S so passes interleave with ingest
    statuses: dict[int, int] = {}
    accepted = duplicates = 0
    lock = threading.Lock()

    def client(mine: list[list[dict]]) -> None:
        nonlocal accepted, duplicates
        rng = random.Random(len(mine))
        with httpx.Client(timeout=60) as http:
            for batch in mine:
                # Every batch once to a random replica; one in four again to the other.
                targets = rng.sample(replicas, 2 if rng.random() < 0.25 else 1)
                for svc in targets:
                    r = http.post(svc.url + "/v1/events", headers=svc.headers(),
                                  content=orjson.dumps({"events": batch}))
                    with lock:
                        statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                        if r.status_code == 202:
                            accepted += r.json()["accepted"]
                            duplicates += r.json()["duplicates"]
                time.sleep(pace_s)

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(batches[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    engine = make_engine(db, pool_size=2)
    try:
        deadline = time.monotonic() + 60
        while True:
            with engine.connect() as conn:
                left = conn.execute(text("SELECT count(*) FROM dirty_jobs")).scalar()
            if left == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        load_s = time.monotonic() - started
        outputs = []
        for proc in aggregators:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
            proc.log_file.seek(0)  # type: ignore[attr-defined]
            outputs.append(proc.log_file.read().decode())  # type: ignore[attr-defined]
        together = results_state(engine)
        stored, distinct = count_events(db)
        wipe_results(engine)
        Aggregator(engine, Taxonomy.default()).run_pass(recompute_all=True)
        alone = results_state(engine)
    finally:
        engine.dispose()
    print(f"\nFAULT replicas: seconds={load_s:.1f} events={len(events)} statuses={statuses}"
          f" accepted={accepted} duplicates={duplicates} stored={stored}"
          f" jobs={len(together['jobs'])}")
    assert left == 0
    assert set(statuses) == {202}
    assert accepted == stored == distinct == len({e["event_id"] for e in events})
    assert not any("Traceback" in out or "failed" in out for out in outputs), outputs
    assert together == alone


def test_a_burst_beyond_the_in_flight_limit_gets_503_with_retry_after(service_factory) -> None:
    svc = service_factory(args=("--no-aggregator",), extra_env={
        "ETT_INGEST_MAX_IN_FLIGHT": "2", "ETT_INGEST_MAX_IN_FLIGHT_BYTES": "65536"})
    release = threading.Event()
    answers: list[int] = []

    def slow_body(payload: bytes):
        yield payload[:100]
        release.wait(30)
        yield payload[100:]

    def slow_post() -> None:
        payload = orjson.dumps({"events": [now_event("burst", 0)]})
        r = httpx.post(svc.url + "/v1/events", content=slow_body(payload),
                       headers={**svc.headers(), "Content-Type": "application/json"},
                       timeout=60)
        answers.append(r.status_code)

    held = [threading.Thread(target=slow_post) for _ in range(2)]
    for t in held:
        t.start()
    time.sleep(1.0)  # both are in flight, their bodies half sent
    started = time.monotonic()
    r = httpx.post(svc.url + "/v1/events", headers=svc.headers(),
                   json={"events": [now_event("burst", 1)]}, timeout=30)
    waited = time.monotonic() - started
    release.set()
    for t in held:
        t.join()
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    assert "limit of 2 concurrent requests" in r.json()["detail"]
    assert waited < 1.0
    assert answers == [202, 202]
    ok = httpx.post(svc.url + "/v1/events", headers=svc.headers(),
                    json={"events": [now_event("burst", 2)]}, timeout=30)
    assert ok.status_code == 202
    # The byte budget: one body bigger than what is left of 64 KiB.
    big = {"events": [now_event("burst", 3)], "pad": "x" * 70_000}
    r = httpx.post(svc.url + "/v1/events", headers=svc.headers(), json=big, timeout=30)
    assert r.status_code == 503 and "bytes of request bodies in flight" in r.json()["detail"]
    print(f"\nFAULT burst: third request answered {r.status_code} in {waited:.3f}s")


def test_a_blocked_database_answers_503_within_the_bounds_and_acknowledges_nothing(
        service_factory) -> None:
    svc: ServiceProcess = service_factory(args=("--no-aggregator",), extra_env={
        "ETT_DB_POOL_SIZE": "2", "ETT_DB_POOL_TIMEOUT_S": "1",
        "ETT_INGEST_STATEMENT_TIMEOUT_MS": "1000"})
    engine = make_engine(svc.database_url, pool_size=1)
    results: list[tuple[int, float, str]] = []
    lock = threading.Lock()

    def post(i: int) -> None:
        ev = now_event("blocked", i)
        started = time.monotonic()
        r = httpx.post(svc.url + "/v1/events", headers=svc.headers(),
                       json={"events": [ev]}, timeout=30)
        with lock:
            results.append((r.status_code, time.monotonic() - started, ev["event_id"]))

    try:
        with engine.connect() as conn:
            conn.execute(text("LOCK TABLE events IN ACCESS EXCLUSIVE MODE"))  # a stuck DB
            threads = [threading.Thread(target=post, args=(i,)) for i in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            conn.rollback()
        assert count_events(svc.database_url)[0] == 0
        stall = max(s for _, s, _ in results)
        codes = sorted({c for c, _, _ in results})
        after = httpx.post(svc.url + "/v1/events", headers=svc.headers(),
                           json={"events": [now_event("blocked", 99)]}, timeout=30)
    finally:
        engine.dispose()
    print(f"\nFAULT blocked-db: statuses={codes} longest_stall_s={stall:.2f}")
    assert codes == [503]
    assert stall < 4.0  # statement timeout 1 s + pool wait 1 s, plus slack for CI
    assert after.status_code == 202


def _signal_cluster(pgdata: Path, sig: signal.Signals) -> None:
    import psutil

    postmaster = psutil.Process(postmaster_pid(pgdata))
    for proc in [postmaster, *postmaster.children(recursive=True)]:
        proc.send_signal(sig)


def test_a_database_that_stops_answering_gets_503_within_the_store_deadline(
        service_factory) -> None:
    # SIGSTOP: every connection stays open and nothing answers, as with a host gone from
    # the network. The server's statement timeout cannot end that wait; the store deadline
    # on the service's side does.
    tmp = Path(tempfile.mkdtemp(prefix="ett-frozen-"))
    pg = EmbeddedPostgres(tmp)
    url = pg.start()
    frozen = False
    try:
        svc: ServiceProcess = service_factory(url, args=("--no-aggregator",), extra_env={
            "ETT_INGEST_STORE_DEADLINE_S": "2", "ETT_TOKEN_CACHE_TTL_S": "60"})
        first = httpx.post(svc.url + "/v1/events", headers=svc.headers(),
                           json={"events": [now_event("frozen", 0)]}, timeout=30)
        assert first.status_code == 202  # the job is claimed; its next batches are grouped
        _signal_cluster(tmp / "pg", signal.SIGSTOP)
        frozen = True
        answers = []
        for job, seq in (("frozen", 1), ("frozen-new", 0)):  # a grouped batch, a claim
            event = now_event(job, seq)
            started = time.monotonic()
            r = httpx.post(svc.url + "/v1/events", headers=svc.headers(),
                           json={"events": [event]}, timeout=30)
            answers.append((r.status_code, time.monotonic() - started, r.headers, event))
        _signal_cluster(tmp / "pg", signal.SIGCONT)
        frozen = False
        retried = [httpx.post(svc.url + "/v1/events", headers=svc.headers(),
                              json={"events": [event]}, timeout=30).json()
                   for *_, event in answers]
        stored, distinct = count_events(url, "job_id LIKE 'frozen%'")
    finally:
        if frozen:
            _signal_cluster(tmp / "pg", signal.SIGCONT)
        pg.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nFAULT frozen-db: statuses={[a[0] for a in answers]}"
          f" waited_s={[round(a[1], 2) for a in answers]}")
    for status, waited, headers, _ in answers:
        assert status == 503 and "retry-after" in headers
        assert 2.0 <= waited < 6.0  # the deadline, plus slack for CI
    # Retried once the database answers again: each event stored exactly once.
    assert [r["accepted"] + r["duplicates"] for r in retried] == [1, 1]
    assert stored == distinct == 3
