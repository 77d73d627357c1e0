from __future__ import annotations

import random
from email.utils import formatdate

from ett_client import transport

from tests.client.fake_service import FakeService, Reply, refused_url


def test_retry_after_reads_seconds_and_http_dates():
    assert transport.parse_retry_after("3") == 3.0
    assert transport.parse_retry_after("-1") == 0.0
    assert transport.parse_retry_after(None) is None
    assert transport.parse_retry_after("soon") is None
    assert 9 <= transport.parse_retry_after(formatdate(1000.0 + 10, usegmt=True), now=1000.0) <= 10


def test_backoff_is_jittered_exponential_and_capped():
    rng = random.Random(1)
    for retry, cap in ((0, 1.0), (1, 2.0), (3, 8.0), (10, 30.0), (100, 30.0)):
        delays = [transport.backoff_s(retry, 1.0, 30.0, rng) for _ in range(200)]
        assert min(delays) >= 0 and max(delays) <= cap
        # Full jitter: spread over the whole interval, not only its upper half.
        assert min(delays) < cap / 10 and max(delays) > cap * 0.9


def test_retry_after_is_the_floor_of_a_jittered_wait():
    rng = random.Random(2)
    delays = [transport.retry_delay_s(0, 1.0, 0.5, 30.0, 300.0, rng) for _ in range(200)]
    assert min(delays) >= 1.0 and max(delays) <= 1.5
    assert len({round(d, 3) for d in delays}) > 100  # not in step
    assert 300.0 <= transport.retry_delay_s(0, 1e6, 0.5, 30.0, 300.0, rng) <= 300.5


def test_the_body_is_a_batch_of_the_spooled_lines():
    assert transport.build_body([b'{"a":1}', b'{"b":2}']) == b'{"events":[{"a":1},{"b":2}]}'


def test_outcomes_say_what_to_retry(fake: FakeService):
    body = transport.build_body([b'{"event_id":"x"}'])
    for status, retry in ((429, True), (500, True), (502, True), (503, True), (504, True),
                          (400, False), (401, False), (403, False), (413, False), (422, False)):
        fake.script = [Reply(status, headers={"Retry-After": "7"})]
        outcome = transport.post_batch(fake.url + "/v1/events", "t", body, 2.0)
        assert (outcome.status, outcome.retry) == (status, retry)
        assert outcome.retry_after_s == 7.0
    outcome = transport.post_batch(fake.url + "/v1/events", "t", body, 2.0)
    assert (outcome.status, outcome.accepted, outcome.retry) == (202, 1, False)
    down = transport.post_batch(refused_url() + "/v1/events", "t", body, 2.0)
    assert down.status is None and down.retry
