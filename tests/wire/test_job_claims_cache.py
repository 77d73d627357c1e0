"""A batch decided from cached claims: the shortcut for rows that all join their jobs as
they are (`JobClaimsCheck._all_kept`) decides exactly what the whole way decides."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from service.store.copy_text import EventRow, EventRows
from service.wire.batch import ValidatedBatch
from service.wire.job_claims import ClaimCache, JobClaimsCheck

JOBS, MODELS, TEAMS = ["j1", "j2"], ["m1", "m2"], [None, "t1", "t2"]
_rows = st.lists(st.tuples(st.sampled_from(JOBS), st.sampled_from(MODELS),
                           st.sampled_from(TEAMS), st.booleans()), min_size=1, max_size=4)
_claims = st.dictionaries(st.sampled_from(JOBS),
                          st.tuples(st.sampled_from(MODELS), st.sampled_from(TEAMS)))


def _batch(rows: list[tuple[str, str, str | None, bool]]) -> ValidatedBatch:
    events = [EventRow(f"00000000-0000-4000-8000-00000000000{i}", "2026-11-01T00:00:00Z", job,
                       0, model, "heartbeat", None, None, team, None,
                       '{"source":"scheduler"}' if scheduler else None, None)
              for i, (job, model, team, scheduler) in enumerate(rows)]
    return ValidatedBatch(EventRows.of_rows(events), {r[0] for r in rows}, [], 0, [],
                          list(range(len(rows))))


def _decided(batch: ValidatedBatch, claims: dict, writer_team: str | None, shortcut: bool
             ) -> tuple:
    cache = ClaimCache()
    cache.learn(claims)
    check = JobClaimsCheck(batch, writer_team)
    if not shortcut:
        check._all_kept = lambda _cache: False  # type: ignore[method-assign]
    rows = check.from_cache(cache)
    return (None if rows is None else list(rows.rows()), check.kept, check.rejected,
            check.moved)


@settings(max_examples=300, deadline=None)
@given(_rows, _claims, st.sampled_from(TEAMS))
def test_the_shortcut_decides_what_the_whole_way_decides(rows, claims, writer_team) -> None:
    batch = _batch(rows)
    whole = _decided(batch, claims, writer_team, shortcut=False)
    assert _decided(batch, claims, writer_team, shortcut=True) == whole


def test_the_usual_batch_takes_the_shortcut() -> None:
    batch = _batch([("j1", "m1", None, False), ("j1", "m1", "t1", False)])
    cache = ClaimCache()
    cache.learn({"j1": ("m1", "t1")})
    check = JobClaimsCheck(batch, "t1")
    assert check._all_kept(cache)
    assert check.from_cache(cache) is batch.rows and check.kept == 2
