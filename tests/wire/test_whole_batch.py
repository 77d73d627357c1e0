"""The whole-batch path (`service.wire.whole`) decides a body exactly as event-by-event
validation does, or leaves it to that path: it never accepts, rejects or stores otherwise.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.access.auth import Principal
from service.ingest import parse_batch
from service.wire.batch import validate_batch
from service.wire.event import WireError, parse_rfc3339
from service.wire.whole import decide_whole
from tests.factories import event
from tests.wire.test_ingest_paths import _changes, _normal

NOW = datetime(2026, 11, 2, tzinfo=UTC)
LIMITS = {"max_future_s": 300.0, "max_age_s": 30 * 86400.0}
ADMIN = Principal(role="admin", token_id="t")

# Fields as sent on the wire where they differ from what Python would build: values orjson
# reads differently from msgspec (integers beyond 64 bits, escapes, duplicate keys) only
# exist as JSON text.
_raw_texts = st.sampled_from([
    '"attempt": 18446744073709551616', '"gpus": 1.0', '"attrs": {"n": 123456789012345678901234}',
    '"attrs": {"s": "\\u0000"}', '"attrs": {"s": "\\ud800"}', '"job_id": "\\ud800"',
    '"attempt": 1, "attempt": -1', '"phase": null', '"team": null', '"gpus": null',
    '"attrs": null', '"rank": 2147483648', '"attrs": {"step": 9223372036854775808}',
    '"phase": "lost_progress"', '"ts": "2026-11-01t10:00:00z"',
    # A backslash msgspec would read as an escape once the stamps are joined into an array:
    '"ts": "2026-11-01T00:01:00.5\\\\u0030Z"', '"ts": "2026-11-01T00:01:00\\\\u005a"',
])


def _body(raw: list, extra: list[str | None]) -> bytes:
    parts = []
    for obj, text in zip(raw, extra, strict=True):
        dumped = json.dumps(obj)  # also an integer beyond 64 bits, as a client may send
        parts.append(dumped if text is None else dumped[:-1] + ", " + text + "}")
    return ('{"events": [' + ", ".join(parts) + "]}").encode()


def _decide(body: bytes) -> tuple[list, list] | None:
    """The per-event path's answer for `body`: stored rows and rejections (None: 4xx)."""
    try:
        raw = parse_batch(body, 5000)
    except Exception:
        return None
    batch = validate_batch(raw, ADMIN, now=NOW, **LIMITS)
    return [_normal(row) for row in batch.rows.rows()], batch.rejected


def _batch(changes: list[dict], data: st.DataObject) -> list[dict]:
    raw = []
    for change in changes:
        obj = event(data.draw(st.sampled_from(["heartbeat", "phase_start", "allocated",
                                               "failure", "checkpoint", "released"])), 1,
                    phase="training", gpus=8, team="ads", rank=0, attrs={"step": 3})
        obj.update(change)
        raw.append(obj)
    return raw


@settings(max_examples=400, deadline=None)
@given(st.lists(_changes, min_size=1, max_size=6), st.data())
def test_the_whole_path_stores_what_event_by_event_validation_stores_or_defers(changes, data):
    raw = _batch(changes, data)
    extra = [data.draw(st.one_of(st.none(), _raw_texts)) for _ in raw]
    body = _body(raw, extra)
    whole = decide_whole(body, 5000, ADMIN, now=NOW, **LIMITS)
    if whole is None:
        return  # the per-event path decides it (the property of test_ingest_paths)
    assert _decide(body) == ([_normal(row) for row in whole.rows.rows()], [])
    assert whole.rejected == [] and whole.in_batch_duplicates == 0
    assert whole.jobs == {obj["job_id"] for obj in orjson.loads(body)["events"]}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["heartbeat", "phase_start", "phase_end", "allocated",
                                 "failure", "checkpoint", "released"]), min_size=1,
                max_size=20),
       st.sampled_from(["2026-11-01T10:00:00Z", "2026-11-01T10:00:00.5Z",
                        "2026-11-01T23:59:59.999999+00:00", "2026-10-03T00:00:01Z"]))
def test_plain_valid_batches_take_the_whole_path_with_the_same_rows(types, stamp) -> None:
    # Without this the property above would hold for a path that always defers.
    attrs = {"failure": {"cause": "infra", "reason": "x\\y"}, "released": {"reason": "failed"},
             "checkpoint": {"snapshot_ts": "2026-11-01T09:00:00Z", "step": 7},
             "phase_start": {"background": False}, "heartbeat": {"step": 2**62}}
    raw = [event(t, 0, ts=stamp, phase="training", gpus=2**10, rank=i, team="ads",
                 **({"attrs": attrs[t]} if t in attrs else {})) for i, t in enumerate(types)]
    body = orjson.dumps({"events": raw})
    whole = decide_whole(body, 5000, ADMIN, now=NOW, **LIMITS)
    assert whole is not None
    assert _decide(body) == ([_normal(row) for row in whole.rows.rows()], [])


@pytest.mark.parametrize("change", [
    {"event_id": str(uuid.uuid4()).upper()},  # valid, stored in another normal form
    {"ts": "2026-11-01T12:00:00+02:00"}, {"ts": "2026-11-01t10:00:00z"},
    {"ts": "2026-02-30T10:00:00Z"},  # no such day: rejected on its own
    {"ts": "2026-11-02T00:05:00Z"},  # past the bound
    {"ts": "2026-11-01T00:01:00.5\\u0030Z"},  # an escape once joined into a JSON array
    {"future_field": 1}, {"type": "phase_end", "phase": None}, {"gpus": 0}, {"job_id": "a b"},
    {"phase": "lost_progress"}, {"type": "started"},
])
def test_an_unusual_event_sends_the_whole_batch_to_the_per_event_path(change) -> None:
    raw = [event("heartbeat", 1), dict(event("heartbeat", 2), **change)]
    assert decide_whole(orjson.dumps({"events": raw}), 5000, ADMIN, now=NOW, **LIMITS) is None


def _nested(levels: int) -> object:
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(("attrs", "whole"), [
    # Together past the size and nesting limits, each within them: the whole path.
    ([{"s": "x" * 6000}, {"s": "y" * 6000}], True),
    ([{"a": _nested(10)} for _ in range(4)], True),
    # One past a limit: the per-event path, which rejects that event alone.
    ([{"s": "x" * 9000}, {"s": "y"}], False),
    ([{"s": "y"}, {"a": _nested(40)}], False),
    ([None, {"s": "\u0000"}], False),
])
def test_attrs_limits_hold_event_by_event_on_the_whole_path(attrs, whole) -> None:
    raw = [event("heartbeat", i, **({} if a is None else {"attrs": a}))
           for i, a in enumerate(attrs)]
    body = orjson.dumps({"events": raw})
    decided = decide_whole(body, 5000, ADMIN, now=NOW, **LIMITS)
    assert (decided is not None) == whole
    if decided is not None:
        assert _decide(body) == ([_normal(row) for row in decided.rows.rows()], [])
    else:
        rows, rejected = _decide(body)
        assert len(rows) + len(rejected) == len(attrs) and len(rejected) == 1


def test_a_duplicate_within_the_batch_or_a_foreign_model_defers() -> None:
    one = event("heartbeat", 1)
    assert decide_whole(orjson.dumps({"events": [one, one]}), 5000, ADMIN, now=NOW,
                        **LIMITS) is None
    writer = Principal(role="writer", token_id="w", model_patterns=("ads_*",))
    body = orjson.dumps({"events": [event("heartbeat", 1, model="search")]})
    assert decide_whole(body, 5000, writer, now=NOW, **LIMITS) is None
    assert decide_whole(orjson.dumps({"events": [event("heartbeat", 1, model="ads_x")]}),
                        5000, writer, now=NOW, **LIMITS) is not None


@pytest.mark.parametrize("body", [b"", b"[]", b'{"events": []}', b'{"events": {}}', b"{"])
def test_a_body_that_is_not_a_batch_is_left_to_the_per_event_path(body) -> None:
    assert decide_whole(body, 5000, ADMIN, now=NOW, **LIMITS) is None


def test_more_events_than_the_limit_defer() -> None:
    body = orjson.dumps({"events": [event("heartbeat", i / 60) for i in range(3)]})
    assert decide_whole(body, 2, ADMIN, now=NOW, **LIMITS) is None


@pytest.mark.parametrize("value", [
    "2026-12-01T05:38:36Z", "2026-12-01t05:38:36z", "2026-12-01 05:38:36Z",
    "2026-12-01T05:38:36.123456789Z", "2026-12-01T06:38:36+01:00", "2026-12-01T05:38:36-00:00",
])
def test_rfc3339_in_either_case_is_accepted(value) -> None:
    assert parse_rfc3339(value, "ts") == datetime(2026, 12, 1, 5, 38, 36,
                                                   123456 if "." in value else 0, tzinfo=UTC)


@pytest.mark.parametrize("value", [
    "2026-W49-2T05:38:36Z", "20261201T053836Z", "2026-12-01T05Z", "2026-12-01T05:38Z",
    "2026-12-01T05:38:36+0100", "2026-12-01T05:38:36+01", "2026-12-01T05:38:36,5Z",
    "2026-12-01T05:38:36.Z", "2026-12-01", "٢٠٢٦-12-01T05:38:36Z", "2026-12-01T05:38:36+01:00:30",
])
def test_iso8601_forms_outside_rfc3339_are_rejected(value) -> None:
    with pytest.raises(WireError, match=r"is not an RFC 3339 timestamp|needs a time of day"):
        parse_rfc3339(value, "ts")
