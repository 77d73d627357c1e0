"""Every job_id the contract allows is readable, and every window the parser accepts is
answered 200 or 422, never 500."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.factories import spec_example


@pytest.mark.parametrize("job_id", ["a/b/c", "team/run:7/attempt-2", "/lead", "trail/"])
def test_a_job_id_with_slashes_is_readable_as_is_and_percent_encoded(api, agg,
                                                                      job_id: str) -> None:
    r = api.post("/v1/events", json={"events": spec_example(job_id=job_id)})
    assert r.status_code == 202 and not r.json()["rejected"], r.text
    api.post("/v1/aggregate")
    for path in (job_id, job_id.replace("/", "%2F")):
        got = api.get(f"/v1/jobs/{path}")
        assert got.status_code == 200, (path, got.text)
        assert got.json()["job_id"] == job_id
        assert got.json()["ett_ratio"] == pytest.approx(0.5625)  # docs/model.md section 6


def test_an_unknown_job_with_slashes_is_404_naming_it(api, agg) -> None:
    r = api.get("/v1/jobs/x%2Fy")
    assert r.status_code == 404 and "'x/y'" in r.json()["detail"]


@pytest.mark.parametrize("params", [
    {"end": "9999-12-31T23:00:00Z"}, {"start": "0001-01-01T00:00:00Z"},
    {"end": "0001-01-01T00:00:00Z"}, {"end": "0001-01-02T00:00:00+00:00"},
    {"start": "9999-12-30T00:00:00Z", "end": "9999-12-31T23:59:59Z"},
])
@pytest.mark.parametrize("route", ["/v1/ett", "/v1/teams/ads/bill"])
def test_extreme_windows_are_422_naming_the_field(api, agg, route: str, params) -> None:
    r = api.get(route, params=params)
    assert r.status_code == 422, r.text
    assert "outside the supported range" in r.json()["detail"]


_instants = st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31),
                         timezones=st.just(UTC)
                         | st.builds(lambda m: timezone(timedelta(minutes=m)),
                                     st.integers(-23 * 60, 23 * 60)))


def _rfc3339(dt: datetime) -> str:
    return dt.isoformat().replace("+00:00", "Z")


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(start=st.none() | _instants, end=st.none() | _instants,
       route=st.sampled_from(["/v1/ett", "/v1/teams/ads/bill"]))
def test_any_window_the_parser_accepts_is_200_or_422(api, agg, start, end, route) -> None:
    params = {k: _rfc3339(v) for k, v in (("start", start), ("end", end)) if v is not None}
    r = api.get(route, params=params)
    assert r.status_code in (200, 422), (params, r.text)
