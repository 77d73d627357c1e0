"""The fixture the console tests share: the app, signed in."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.console.console_helpers import sign_in


@pytest.fixture
def browser(api: TestClient) -> TestClient:
    """The same app as `api`, signed in to the console with a cookie (and no bearer)."""
    client = TestClient(api.app)
    assert sign_in(client).status_code == 303
    return client
