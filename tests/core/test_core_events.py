"""Events: wire conversion, event-time order, de-duplication."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ett_core import Event
from ett_core.events import order_events
from ett_core.instants import (
    MAX_TS_US,
    MIN_TS_US,
    format_rfc3339_us,
    parse_instant_us,
    parse_rfc3339_us,
    us_to_dt,
)


def wire_event(**overrides):
    body = {
        "event_id": "6f1c1c52-6b0e-4a4e-9d0a-0c2b7f1f5a01",
        "ts": "2024-05-01T12:00:00.250+02:00",
        "job_id": "job-1",
        "attempt": 0,
        "model": "llama",
        "type": "phase_start",
        "phase": "training",
        "rank": 0,
        "attrs": {"background": True},
    }
    body.update(overrides)
    return body


def test_from_wire_converts_the_timestamp_to_utc_microseconds():
    event = Event.from_wire(wire_event())
    assert event.ts_us == parse_rfc3339_us("2024-05-01T10:00:00.25Z")
    assert format_rfc3339_us(event.ts_us) == "2024-05-01T10:00:00.250000Z"
    assert (event.phase, event.rank, event.attrs) == ("training", 0, {"background": True})


@given(st.integers(MIN_TS_US, MAX_TS_US))
def test_an_instant_is_formatted_as_its_datetime_reads_and_parses_back(ts_us):
    moment = us_to_dt(ts_us)
    base = moment.strftime("%Y-%m-%dT%H:%M:%S")
    expected = f"{base}.{moment.microsecond:06d}Z" if moment.microsecond else f"{base}Z"
    assert format_rfc3339_us(ts_us) == expected
    if moment.year >= 1000:  # strftime writes earlier years with fewer digits
        assert parse_rfc3339_us(format_rfc3339_us(ts_us)) == ts_us


def test_from_wire_fills_absent_optional_fields_with_none():
    body = wire_event(type="heartbeat")
    for key in ("phase", "rank", "attrs"):
        body.pop(key)
    event = Event.from_wire(body)
    assert (event.phase, event.gpus, event.team, event.rank, event.attrs) == (
        None,
        None,
        None,
        None,
        {},
    )


def test_from_wire_refuses_a_timestamp_without_offset():
    with pytest.raises(ValueError):
        Event.from_wire(wire_event(ts="2024-05-01T12:00:00"))


def test_snapshot_instants_may_be_rfc3339_or_epoch_seconds():
    assert parse_instant_us("1970-01-01T00:00:01.5Z") == 1_500_000
    assert parse_instant_us(1.5) == 1_500_000
    assert parse_instant_us(2) == 2_000_000
    assert parse_instant_us("not a time") is None
    assert parse_instant_us(True) is None
    assert parse_instant_us(float("nan")) is None


def make(event_id: str, ts_us: int, type: str, **fields) -> Event:
    return Event(
        event_id=event_id, ts_us=ts_us, job_id="j", attempt=0, model="m", type=type, **fields
    )


def test_events_are_ordered_by_time_then_type_then_id_never_by_arrival():
    events = [
        make("e", 5, "released"),
        make("d", 5, "phase_start", phase="a"),
        make("c", 5, "failure"),
        make("b", 5, "phase_end", phase="a"),
        make("a", 5, "checkpoint"),
        make("z", 5, "allocated"),
        make("y", 1, "heartbeat"),
    ]
    for _ in range(5):
        random.shuffle(events)
        ordered, _ = order_events(events)
        assert [e.event_id for e in ordered] == ["y", "z", "a", "b", "c", "d", "e"]


def test_a_duplicate_event_id_counts_once():
    first = make("x", 1, "heartbeat")
    ordered, dropped = order_events([first, first, make("y", 2, "heartbeat"), first])
    assert [e.event_id for e in ordered] == ["x", "y"]
    assert dropped == 2


def test_conflicting_bodies_under_one_event_id_resolve_the_same_whatever_the_order():
    beat, fail = make("x", 1, "heartbeat"), make("x", 1, "failure")
    assert order_events([beat, fail])[0] == order_events([fail, beat])[0]
    assert len(order_events([beat, fail])[0]) == 1


def test_one_event_id_at_two_instants_is_two_events():
    # A seeded trainer re-sends its ids on every restart: each instant is its own event.
    early, late = make("x", 1, "heartbeat"), make("x", 9, "heartbeat")
    assert order_events([early, late]) == ((early, late), 0)
