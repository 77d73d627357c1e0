"""What the tests of who may do what share: tokens made in the database, events within the
ingest window, posting them with a token."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text

from service.access import tokens
from tests import factories

# Writers may send only events within the ingest window (7 days).
RECENT = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(days=1)


def event(type_: str, minutes: float, **fields: Any) -> dict[str, Any]:
    return factories.event(type_, minutes, **{"base": RECENT, **fields})


def token(engine, role: str, team: str | None = None, patterns: tuple[str, ...] = ()) -> dict:
    """A new token of `role` in the database: its Authorization header, and its id."""
    with engine.begin() as conn:
        info, secret = tokens.create_token(conn, role, team, patterns)
    return {"Authorization": f"Bearer {secret}", "id": info.token_id}


def auth(headers: dict) -> dict:
    return {"Authorization": headers["Authorization"]}


def stored_models(engine) -> list[str]:
    with engine.connect() as conn:
        return [r[0] for r in conn.execute(text("SELECT model FROM events ORDER BY model"))]


def post(client, headers, events):
    return client.post("/v1/events", json={"events": events}, headers=auth(headers))


def until(condition, what: str, seconds: float = 10.0) -> None:
    """Wait until `condition()` holds (work a request started in the background)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {seconds} s"
        time.sleep(0.01)
