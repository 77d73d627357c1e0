"""Rejected events are never dropped silently: they go to the dead-letter
file beside the spool, are counted, and each distinct reason is logged once."""

from __future__ import annotations

import json
import logging
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.client.fake_service import FakeService, Reply


def dead_letters(spool: Path) -> list[dict[str, Any]]:
    path = spool / "rejected.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.slow
def test_events_the_real_service_rejects_are_kept_counted_and_logged_once(
        service: Any, make_recorder: Any, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    """`other` is a reserved model name: the service rejects every event of this recorder
    (202, each listed in `rejected`); before, the SDK logged a sample and dropped them."""
    caplog.set_level(logging.DEBUG, logger="ett_client")
    rec = make_recorder(service.url, token=service.token, model="other", job_id="dead-1")
    for _ in range(3):
        rec.heartbeat()
    assert rec.flush(timeout=20)
    stats = rec.stats()
    assert stats["rejected"] == 3 and stats["dead_lettered"] == 3
    kept = dead_letters(tmp_path / "spool")
    assert len(kept) == stats["dead_lettered"]
    assert {k["event"]["model"] for k in kept} == {"other"}
    assert all("'other' is reserved" in k["error"] and k["status"] == 202 for k in kept)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING
                and "rejected events" in r.getMessage()]
    assert len(warnings) == 1  # one distinct reason, logged once


def test_a_batch_refused_whole_is_kept_in_the_dead_letter_file(fake: FakeService,
                                                               make_recorder: Any,
                                                               tmp_path: Path) -> None:
    fake.script = [Reply(422)]
    rec = make_recorder(fake.url)
    rec.heartbeat()
    assert rec.flush(timeout=5)
    kept = dead_letters(tmp_path / "spool")
    assert rec.stats()["dead_lettered"] == len(kept) == rec.stats()["rejected"] >= 1
    assert kept[0]["status"] == 422 and kept[0]["event"]["job_id"] == "job-1"


def test_an_in_memory_spool_counts_rejections_without_a_file(fake: FakeService,
                                                             make_recorder: Any) -> None:
    fake.script = [Reply(202, reject_indexes=(0,))]
    rec = make_recorder(fake.url, spool_dir=":memory:")
    rec.heartbeat()
    assert rec.flush(timeout=5)
    assert rec.stats()["rejected"] == 1 and rec.stats()["dead_lettered"] == 0


@pytest.mark.slow
def test_events_stored_in_their_teams_own_job_are_logged_with_its_name(
        service: Any, make_recorder: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Another team wrote this job id first: the service keeps the events, in the job
    `{job_id}@{team}`, and the SDK says so once (the name a reader must use)."""
    squat = {"event_id": str(uuid.uuid4()), "ts": datetime.now(UTC).isoformat(),
             "job_id": "squatted-1", "attempt": 0, "model": "feed_x", "type": "heartbeat",
             "team": "feed"}
    assert httpx.post(service.url + "/v1/events", json={"events": [squat]},
                      headers=service.headers()).json()["accepted"] == 1
    caplog.set_level(logging.DEBUG, logger="ett_client")
    rec = make_recorder(service.url, token=service.token, model="ads_x", team="ads",
                        job_id="squatted-1")
    rec.heartbeat()
    rec.heartbeat()
    assert rec.flush(timeout=20)
    assert rec.stats()["acknowledged"] == 2 and rec.stats()["rejected"] == 0
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
            and "squatted-1@ads" in r.getMessage()]
    assert len(said) == 1
