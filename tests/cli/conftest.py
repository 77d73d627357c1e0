"""The fixture the command-line tests share: the worked example stored and aggregated."""

from __future__ import annotations

import pytest

from tests.factories import spec_example


@pytest.fixture
def aggregated(api, database_url, monkeypatch) -> None:
    """The worked example posted and aggregated; `ett` run in-process reads the same
    database (ETT_DATABASE_URL), at 120 columns."""
    monkeypatch.setenv("ETT_DATABASE_URL", database_url)
    monkeypatch.setenv("ETT_LOG_LEVEL", "warning")
    monkeypatch.setenv("COLUMNS", "120")
    assert api.post("/v1/events", json={"events": spec_example()}).json()["rejected"] == []
    assert api.post("/v1/aggregate").status_code == 200
