"""Console sessions are capped per token (its least recently used
goes first) and as a whole, and the whole's cap never closes another token's session."""

from __future__ import annotations

import pytest

from service.access.auth import Authenticator
from service.console.session import Sessions
from service.errors import Unavailable
from tests.conftest import ADMIN_TOKEN


def test_a_token_holds_at_most_its_cap_and_its_oldest_session_goes_first() -> None:
    sessions = Sessions(Authenticator(ADMIN_TOKEN), max_sessions=1000, per_token=3)
    first = [sessions.open("reader-token") for _ in range(3)]
    admin = sessions.open(ADMIN_TOKEN)
    newer = [sessions.open("reader-token") for _ in range(5)]
    assert sessions.count("reader-token") == 3
    assert sessions.count(ADMIN_TOKEN) == 1 and sessions.count() == 4
    alive = set(sessions._by_id)
    assert not alive & set(first) and set(newer[-3:]) <= alive and admin in alive


def test_the_whole_cap_never_closes_another_tokens_session() -> None:
    sessions = Sessions(Authenticator(ADMIN_TOKEN), max_sessions=10, per_token=20)
    admin = sessions.open(ADMIN_TOKEN)
    # One token signing in 10,200 times once signed the admin out.
    for _ in range(200):
        sessions.open("reader-token")
    assert sessions.count("reader-token") == 9
    assert admin in sessions._by_id
    # Full: a token with none of its own is refused, not given someone else's place.
    with pytest.raises(Unavailable) as refused:
        sessions.open("third-token")
    assert "ETT_CONSOLE_MAX_SESSIONS" in refused.value.message
    sessions.close(admin)
    assert sessions.open("third-token") in sessions._by_id


def test_signing_in_past_the_cap_keeps_the_admin_signed_in(api, db_engine) -> None:
    from fastapi.testclient import TestClient

    from service.access import tokens

    with db_engine.begin() as conn:
        _info, reader = tokens.create_token(conn, "reader")
    admin = TestClient(api.app)
    assert admin.post("/ui/login", data={"token": ADMIN_TOKEN},
                      follow_redirects=False).status_code == 303
    hostile = TestClient(api.app)
    for _ in range(30):
        assert hostile.post("/ui/login", data={"token": reader},
                            follow_redirects=False).status_code == 303
    sessions = api.app.state.console_sessions
    assert sessions.count() == 21  # the reader's 20 and the admin's one
    assert admin.get("/ui/", follow_redirects=False).status_code == 200
