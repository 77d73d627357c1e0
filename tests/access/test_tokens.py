"""The token store (service.access.tokens) and `ett tokens` on a real PostgreSQL."""

from __future__ import annotations

import hashlib
import threading
import time

import pytest
from sqlalchemy import event, text

from service.access import tokens
from service.cli import main
from service.errors import Unavailable
from service.store.engine import make_engine
from tests.access.access_helpers import until
from tests.factories import FakeClock


def create(engine, role="writer", team="ads", patterns=("ads_*",)):
    with engine.begin() as conn:
        return tokens.create_token(conn, role, team, patterns)


def clocked_store(engine) -> tuple[tokens.TokenStore, FakeClock]:
    """A store with a 3 s TTL on a clock the test moves."""
    clock = FakeClock()
    return tokens.TokenStore(engine, cache_ttl_s=3.0, clock=clock), clock


def revoke(engine, token_id: str) -> tokens.TokenInfo | None:
    with engine.begin() as conn:
        return tokens.revoke_token(conn, token_id)


def test_only_a_sha256_of_the_token_is_stored(db_engine) -> None:
    info, secret = create(db_engine)
    assert secret.startswith(f"ett_{info.token_id}_")
    with db_engine.connect() as conn:
        row = conn.execute(text("SELECT * FROM api_tokens")).mappings().one()
    assert row["secret_sha256"] == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in str(dict(row))
    assert (row["role"], row["team"], row["model_patterns"]) == ("writer", "ads", ["ads_*"])
    assert row["created_at"] is not None and row["last_used_at"] is None


def test_two_tokens_never_share_a_secret(db_engine) -> None:
    secrets_ = {create(db_engine)[1] for _ in range(20)}
    assert len(secrets_) == 20


def test_a_lookup_gives_the_principal_and_unknown_tokens_give_none(db_engine) -> None:
    info, secret = create(db_engine)
    store = tokens.TokenStore(db_engine)
    principal = store.lookup(secret)
    assert principal is not None
    assert (principal.role, principal.token_id, principal.team, principal.model_patterns) == (
        "writer", info.token_id, "ads", ("ads_*",))
    assert principal.may_write("ads_ctr") and not principal.may_write("search_rank")
    assert store.lookup(secret + "x") is None
    assert store.lookup("ett_" + info.token_id + "_guess") is None


def test_a_revoked_token_is_refused_once_the_cache_entry_expires(db_engine) -> None:
    info, secret = create(db_engine)
    store, clock = clocked_store(db_engine)
    assert store.lookup(secret) is not None
    assert revoke(db_engine, info.token_id).revoked_at is not None
    clock.now += 2.9
    assert store.lookup(secret) is not None  # still cached: the documented delay
    clock.now += 0.2
    assert store.lookup(secret) is None


def _queries(engine) -> tuple[list[str], object]:
    """The token lookups the engine runs from now on, and the listener (to remove)."""
    seen: list[str] = []

    def count(_conn, _cursor, statement, *_a) -> None:
        if "FROM api_tokens" in statement:
            seen.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    return seen, count


def _all_at_once(n: int, work) -> None:
    """`work` in `n` threads released together; returns once every one has ended."""
    start = threading.Barrier(n)

    def one() -> None:
        start.wait()
        work()

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_a_token_in_use_is_looked_up_again_in_the_background_before_it_expires(
        db_engine) -> None:
    _, secret = create(db_engine)
    store, clock = clocked_store(db_engine)
    seen, listener = _queries(db_engine)
    try:
        assert store.lookup(secret) is not None
        clock.now += 1.9
        assert store.peek(secret) is not None
        assert len(seen) == 1  # not yet due
        clock.now += 0.2  # two thirds of the TTL: the next lookup starts, the answer stays
        assert store.peek(secret) is not None
        until(lambda: len(seen) == 2, "the background lookup")
        assert store.peek(secret) is not None
        clock.now += 1.5  # past the first entry's expiry, within the refreshed one's
        assert store.peek(secret) is not None
        assert len(seen) == 2
    finally:
        event.remove(db_engine, "before_cursor_execute", listener)


def test_the_tokens_in_use_are_looked_up_again_together_and_an_idle_one_is_left_to_expire(
        db_engine) -> None:
    secrets = [create(db_engine, team=f"team{i}")[1] for i in range(5)]
    revoked, revoked_secret = create(db_engine, team="gone")
    store, clock = clocked_store(db_engine)
    for secret in [*secrets, revoked_secret]:
        assert store.lookup(secret) is not None
    clock.now += 1.5  # one token filled later: not past a third of its TTL when the others refresh
    assert store.lookup(late := create(db_engine, team="late")[1]) is not None
    revoke(db_engine, revoked.token_id)
    seen, listener = _queries(db_engine)
    try:
        clock.now += 0.4  # the first six are past a third of their TTL, not yet due
        for secret in [*secrets[1:], revoked_secret]:  # secrets[0] goes idle
            assert store.peek(secret) is not None
        clock.now += 0.1  # two thirds of the first six's TTL: the next peek starts it
        assert store.peek(late) is not None  # `late` is only a third through: not due
        assert store.peek(secrets[1]) is not None
        until(lambda: store.peek(revoked_secret) is None, "the revocation")
        assert len(seen) == 1  # one query for every token in use that was due
        clock.now += 1.0  # past the first entries' expiry, within the refreshed ones'
        assert all(store.peek(secret) is not None for secret in secrets[1:])
        assert store.peek(secrets[0]) is None  # idle: not refreshed, expired
    finally:
        event.remove(db_engine, "before_cursor_execute", listener)


def test_the_bound_on_entries_counts_new_tokens_not_refreshed_ones(db_engine) -> None:
    secrets = [create(db_engine, team=f"team{i}")[1] for i in range(3)]
    store, clock = clocked_store(db_engine)
    store.MAX_ENTRIES = 3
    for secret in secrets:
        assert store.lookup(secret) is not None
    seen, listener = _queries(db_engine)
    try:
        clock.now += 1.5  # in use, not yet due
        for secret in secrets:
            assert store.peek(secret) is not None
        clock.now += 0.6
        assert store.peek(secrets[0]) is not None  # due: the refresh of all three starts
        until(lambda: len(seen) == 1 and not store._refreshing, "the refresh")
        clock.now += 1.0  # past the first entries' expiry: only the refreshed ones answer
        assert all(store.peek(secret) is not None for secret in secrets)
        assert store.lookup(create(db_engine, team="fourth")[1]) is not None
        assert all(store.peek(secret) is None for secret in secrets)  # the bound: cleared
    finally:
        event.remove(db_engine, "before_cursor_execute", listener)


def test_a_revocation_reaches_a_token_in_use_within_the_ttl(db_engine) -> None:
    info, secret = create(db_engine)
    store, clock = clocked_store(db_engine)
    assert store.lookup(secret) is not None
    revoke(db_engine, info.token_id)
    clock.now += 2.5
    assert store.peek(secret) is not None  # the cached answer, while the refresh runs
    until(lambda: store.peek(secret) is None, "the revocation")
    assert store.lookup(secret) is None


def test_lookups_of_an_expired_token_share_one_query(db_engine) -> None:
    _, secret = create(db_engine)
    store = tokens.TokenStore(db_engine)
    seen, listener = _queries(db_engine)

    def slow(_conn, _cursor, statement, *_a) -> None:
        if "FROM api_tokens" in statement:
            time.sleep(0.3)  # long enough for every thread to find it under way

    event.listen(db_engine, "before_cursor_execute", slow)
    answers: list[object] = []
    try:
        _all_at_once(20, lambda: answers.append(store.lookup(secret)))
    finally:
        event.remove(db_engine, "before_cursor_execute", slow)
        event.remove(db_engine, "before_cursor_execute", listener)
    assert len(answers) == 20 and all(a is not None for a in answers)
    assert len(seen) == 1


def test_a_failed_lookup_reaches_every_request_that_waited_for_it() -> None:
    engine = make_engine("postgresql://nobody@127.0.0.1:9/none", pool_timeout_s=1)
    store = tokens.TokenStore(engine)
    errors: list[BaseException] = []

    def one() -> None:
        try:
            store.lookup("ett_tok_x_y")
        except Unavailable as exc:
            errors.append(exc)

    try:
        _all_at_once(5, one)
    finally:
        engine.dispose()
    assert len(errors) == 5


def test_revoking_twice_keeps_the_first_time_and_unknown_ids_say_so(db_engine) -> None:
    info, _ = create(db_engine)
    with db_engine.begin() as conn:
        first = tokens.revoke_token(conn, info.token_id)
    with db_engine.begin() as conn:
        second = tokens.revoke_token(conn, info.token_id)
        assert tokens.revoke_token(conn, "tok_nope") is None
    assert first.revoked_at == second.revoked_at


def test_last_use_is_written_in_batches_not_per_request(db_engine) -> None:
    info, secret = create(db_engine)
    clock = FakeClock()
    store = tokens.TokenStore(db_engine, last_used_flush_s=10.0, clock=clock)
    statements: list[str] = []

    def count(_conn, _cursor, statement, *_a) -> None:
        statements.append(statement)

    event.listen(db_engine, "before_cursor_execute", count)
    try:
        for _ in range(50):
            store.lookup(secret)
            clock.now += 0.1
        assert not [s for s in statements if s.lstrip().startswith("UPDATE")]
        assert len([s for s in statements if "FROM api_tokens" in s]) == 2  # TTL 3 s, 5 s
        clock.now += 10
        store.lookup(secret)
    finally:
        event.remove(db_engine, "before_cursor_execute", count)
    assert len([s for s in statements if s.lstrip().startswith("UPDATE")]) == 1
    with db_engine.connect() as conn:
        used = conn.execute(text("SELECT last_used_at FROM api_tokens")).scalar()
    assert used is not None
    assert [i.last_used_at for i in _list(db_engine)] == [used]
    assert info.last_used_at is None


def _list(engine):
    with engine.connect() as conn:
        return tokens.list_tokens(conn)


def test_a_lookup_with_the_database_down_is_unavailable_not_unknown() -> None:
    engine = make_engine("postgresql://nobody@127.0.0.1:9/none", pool_timeout_s=1)
    try:
        with pytest.raises(Unavailable) as caught:
            tokens.TokenStore(engine).lookup("ett_tok_x_y")
        assert caught.value.headers["Retry-After"]
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("role", "team", "patterns", "message"),
    [
        ("owner", None, (), "role: must be one of admin, writer, reader"),
        ("writer", None, (), "a writer token needs at least one model pattern"),
        ("reader", None, ("ads_*",), "only writer tokens have model patterns"),
        ("admin", None, ("*",), "only writer tokens have model patterns"),
        ("writer", "a team", ("ads_*",), "team: must be 1-200 characters"),
        ("writer", None, ("ads *",), "is not a model name pattern"),
    ],
)
def test_bad_token_requests_are_refused_with_a_reason(db_engine, role, team, patterns,
                                                      message) -> None:
    with pytest.raises(tokens.TokenError, match=message), db_engine.begin() as conn:
        tokens.create_token(conn, role, team, patterns)


def test_the_cli_creates_lists_and_revokes_tokens(db_engine, database_url, monkeypatch,
                                                  capsys) -> None:
    monkeypatch.setenv("ETT_DATABASE_URL", database_url)
    monkeypatch.setenv("ETT_LOG_LEVEL", "warning")
    assert main(["tokens", "create", "--role", "writer", "--models", "ads_*,rec_*",
                 "--team", "ads"]) == 0
    out = capsys.readouterr().out.splitlines()
    secret = out[-1]
    token_id = out[0].split()[1]
    assert secret.startswith(f"ett_{token_id}_")
    assert "shown only this once" in out[1]
    assert main(["tokens", "create", "--role", "reader"]) == 0
    capsys.readouterr()

    assert main(["tokens", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    first = lines[0].split("\t")
    assert first[:4] == [token_id, "writer", "ads", "ads_*,rec_*"]
    assert first[4].startswith("created=20") and first[5] == "last_used=never"
    assert lines[1].split("\t")[1:4] == ["reader", "-", "-"]
    assert secret not in "\n".join(lines)

    assert main(["tokens", "revoke", token_id]) == 0
    assert "revoked " + token_id in capsys.readouterr().out
    assert main(["tokens", "list"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1  # revoked ones need --all
    assert main(["tokens", "list", "--all"]) == 0
    assert "revoked=20" in capsys.readouterr().out
    assert main(["tokens", "revoke", "tok_nope"]) == 1
    assert main(["tokens", "create", "--role", "writer"]) == 2
    assert "needs at least one model pattern" in capsys.readouterr().err
