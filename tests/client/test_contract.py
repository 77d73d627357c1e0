"""The contract: every kind of event the client emits passes the server's wire validation.

The client never imports the service; only this test ties the two sides together.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.client.fake_service import FakeService

wire = pytest.importorskip("service.wire.event")


def test_every_event_the_client_emits_is_valid_on_the_wire(fake: FakeService, make_recorder,
                                                           monkeypatch):
    monkeypatch.setenv("RANK", "2")
    rec = make_recorder(fake.url, team="team-a", all_ranks=True, attempt=3)
    rec.allocated(gpus=16)
    with rec.phase("training"), rec.phase("checkpoint_save"):
        rec.checkpoint(snapshot_ts=1.7e9, step=12)
        rec.checkpoint(snapshot_ts=datetime.now(UTC))
        rec.checkpoint()
    with rec.phase("upload", background=True):
        pass
    rec.heartbeat()
    rec.heartbeat(step=5)
    rec.failure(cause="preemption", reason="x" * 5000)
    for reason in ("completed", "failed", "preempted", "cancelled"):
        rec.released(reason=reason)
    assert rec.flush(5)
    events = fake.events()
    assert {e["type"] for e in events} == set(wire.EVENT_TYPES)
    now = datetime.now(UTC)
    for event in events:
        parsed = wire.validate_event(event, now=now, max_future_s=300, max_age_s=86400 * 365)
        assert parsed.event_id == event["event_id"]
        assert parsed.rank == 2 and parsed.attempt == 3 and parsed.team == "team-a"


def test_client_and_server_agree_on_the_closed_vocabularies():
    from ett_client import config, events

    assert set(events.EVENT_TYPES) == set(wire.EVENT_TYPES)
    assert set(config.FAILURE_CAUSES) == set(wire.FAILURE_CAUSES)
    assert set(events.RELEASE_REASONS) == set(wire.RELEASE_REASONS)
    assert events.MAX_ATTRS_BYTES == wire.MAX_ATTRS_BYTES
    assert config.NAME_RE.pattern.strip("^$") == wire.NAME_RE.pattern
