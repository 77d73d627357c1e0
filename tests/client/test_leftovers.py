"""What a killed process left in the spool, against the real service:
a new recorder delivers it without recording anything, flush/close wait for it, and a
partly acknowledged segment resumes where the service's answers ended."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import httpx
from ett_client.spool import FileSpool
from sqlalchemy import create_engine, text

from tests.factories import event


def _lines(job_id: str, n: int) -> list[bytes]:
    return [json.dumps(event("heartbeat", i, job_id=job_id)).encode() + b"\n"
            for i in range(n)]


def _stored(service, job_id: str) -> int:
    url = service.database_url
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1)
                           if url.startswith("postgresql://") else url)
    try:
        with engine.connect() as conn:
            return conn.execute(text("SELECT count(*) FROM events WHERE job_id = :j"),
                                {"j": job_id}).scalar_one()
    finally:
        engine.dispose()


def test_a_recorder_that_records_nothing_delivers_the_leftovers_before_close_returns(
        service, make_recorder, tmp_path: Path) -> None:
    job = f"left-{uuid.uuid4().hex[:8]}"
    dead = FileSpool(str(tmp_path / "spool"), 1 << 20)
    assert dead.append(_lines(job, 25)) == 25
    dead.close()  # the process died: its locks are gone, its segment stays
    rec = make_recorder(service.url, token=service.token, job_id=job)
    assert rec.close(timeout=30) is True
    assert _stored(service, job) == 25
    assert not list((tmp_path / "spool").iterdir())  # segment and offset file gone


def test_a_partly_acknowledged_segment_is_not_sent_again_from_its_start(
        service, make_recorder, tmp_path: Path) -> None:
    job = f"part-{uuid.uuid4().hex[:8]}"
    dead = FileSpool(str(tmp_path / "spool"), 1 << 20)
    dead.append(_lines(job, 10))
    batch = dead.next_batch(max_events=4, max_bytes=1 << 20)
    assert batch is not None and len(batch.lines) == 4
    r = httpx.post(service.url + "/v1/events", headers=service.headers(),
                   content=b'{"events":[' + b",".join(x.rstrip() for x in batch.lines) + b"]}",
                   timeout=10)
    assert r.json()["accepted"] == 4
    dead.resolve(batch)  # answered: the offset file records it
    dead.close()         # and then the process was killed
    rec = make_recorder(service.url, token=service.token, job_id=job)
    assert rec.flush(timeout=30) is True
    stats = rec.stats()
    # Only the 6 unacknowledged events were sent: no duplicates of the first 4.
    assert (stats["sent"], stats["duplicates"]) == (6, 0), stats
    assert _stored(service, job) == 10
