"""What validation decides per token is remembered on the principal
(`Principal.verdicts`): the answers are those of a principal deciding afresh, whatever the
model's configured owner is at the time, and the memory is bounded."""

from __future__ import annotations

from datetime import UTC, datetime

from service.access.auth import Principal
from service.wire import batch
from service.wire.batch import validate_batch
from tests.factories import event

NOW = datetime(2026, 11, 2, tzinfo=UTC)
LIMITS = {"max_future_s": 300.0, "max_age_s": 30 * 86400.0}


def _decide(principal: Principal, raw: list[dict], owner: str | None):
    return validate_batch(raw, principal, now=NOW, owner_of=lambda _model: owner, **LIMITS)


def _fresh(principal: Principal) -> Principal:
    return Principal(principal.role, principal.token_id, principal.team,
                     principal.model_patterns)


def test_a_remembered_verdict_is_what_a_fresh_principal_decides_for_every_owner() -> None:
    writer = Principal("writer", "w", team="ranking", model_patterns=("rank_*",))
    cases = [
        ([event("heartbeat", 1, model="rank_a")], None),
        ([event("heartbeat", 1, model="rank_a")], "search"),  # another owner: no team
        ([event("heartbeat", 1, model="rank_a", team="ranking")], "search"),  # refused
        ([event("heartbeat", 1, model="rank_a", team="ranking")], None),
        ([event("heartbeat", 1, model="ads_a")], None),  # not this token's model
    ]
    for _ in range(2):  # the second time round, every verdict is a remembered one
        for raw, owner in cases:
            remembered, fresh = _decide(writer, raw, owner), _decide(_fresh(writer), raw, owner)
            assert (list(remembered.rows.team), remembered.rejected) == (
                list(fresh.rows.team), fresh.rejected)
    assert list(_decide(writer, cases[0][0], None).rows.team) == ["ranking"]
    assert list(_decide(writer, cases[1][0], "search").rows.team) == [None]
    assert "may not claim team" in _decide(writer, *cases[2]).rejected[0]["error"]
    assert "may not write model" in _decide(writer, *cases[4]).rejected[0]["error"]


def test_the_remembered_verdicts_are_bounded(monkeypatch) -> None:
    monkeypatch.setattr(batch, "MAX_VERDICTS", 3)
    writer = Principal("writer", "w", team="ranking", model_patterns=("rank_*",))
    for i in range(7):
        _decide(writer, [event("heartbeat", 1, model=f"rank_{i}")], None)
        assert len(writer.verdicts) <= 3
