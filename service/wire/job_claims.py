"""Job claims (docs/model.md, "Ownership"): a job id is claimed by the model and team of its
first stored event, so a writer can never move another team's job or inject events into
it; and a claim binds only the claiming team, so no writer can take a job id away from
another.

The claims are made and read in the transaction that stores the batch
(`store.events.CLAIM_SQL`); this check then decides each event against them, and words the
rejection so that the writer sees whose job it hit. An event of team B for a job id that
team A claimed first is neither rejected nor merged: it belongs to team B's own job, named
`{job_id}@B` (`@` is outside the names a writer may send, so nobody can claim that name
first), which is claimed in turn.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from service.store.copy_text import EMPTY, EventRows
from service.store.events import Claims

from .batch import ValidatedBatch

Claim = tuple[str, str | None]  # (model, team)
NAMESPACE_SEP = "@"


def namespaced(job_id: str, team: str) -> str:
    """The name of team `team`'s job `job_id` when another team claimed the id first."""
    return f"{job_id}{NAMESPACE_SEP}{team}"


def conflict(job_id: str, model: str, team: str | None, claim: Claim | None) -> str | None:
    """Why an event of `model`/`team` may not join the job `claim` holds; None if it may."""
    if claim is None:
        return None
    claimed_model, claimed_team = claim
    if model != claimed_model or (team is not None and claimed_team is not None
                                  and team != claimed_team):
        return (f"job_id: job {job_id!r} belongs to model {claimed_model!r}"
                f" (team {claimed_team!r}); this event gives model {model!r} (team {team!r}),"
                " and a job's model and team never change")
    return None


def other_teams_claim(job_id: str, model: str, team: str | None, claim: Claim) -> bool:
    """Whether the job id is another team's: the event's team is known and differs from
    the claim's, or the claim has no team and another model (it binds no team)."""
    if team is None or NAMESPACE_SEP in job_id:
        return False
    claimed_model, claimed_team = claim
    return team != claimed_team if claimed_team is not None else model != claimed_model


class ClaimCache:
    """Claims already committed, which never change: a job's model is final from its first
    event, its team once it is set. A batch whose jobs are all known here (and names no team
    for a job that has none yet) is decided without claiming, in the one-statement path;
    the claim's transaction cost single-event posts three more round trips."""

    def __init__(self, max_jobs: int = 100_000) -> None:
        self.max_jobs = max_jobs
        self._claims: Claims = {}

    def get(self, job_id: str) -> Claim | None:
        return self._claims.get(job_id)

    def learn(self, claims: Claims) -> None:
        """Call only once the transaction that read `claims` has committed."""
        if not claims:
            return
        if len(self._claims) + len(claims) > self.max_jobs:
            self._claims.clear()  # crude, but bounded; a miss only costs the claim
        self._claims.update(claims)


class JobClaimsCheck:
    """The `admit` callback of `store.events.store_rows` for one validated batch.

    `writer_team` is the team a row naming none claims for (the writer token's). Keeps
    what it refused in `rejected` (index and message, as the 202 answer lists them), the
    rows it moved to their team's own job in `moved` (index and the job's name), and the
    claims it was given in `seen` (for the cache, once they are committed).
    """

    def __init__(self, batch: ValidatedBatch, writer_team: str | None = None) -> None:
        self.batch = batch
        self.writer_team = writer_team
        self.rejected: list[dict[str, Any]] = []
        self.moved: list[dict[str, Any]] = []
        self.kept = len(batch.rows)
        self.seen: Claims = {}
        # The rows of the next claim round and their indices in the batch (None: the
        # batch's own, the first round).
        self._pending: tuple[EventRows, list[int]] | None = None

    def from_cache(self, cache: ClaimCache) -> EventRows | None:
        """The rows to store if `cache` decides every one; None if the database must."""
        if self._all_kept(cache):
            self._reset()
            self.kept = len(self.batch.rows)
            return self.batch.rows
        self._reset()
        kept: list[EventRows] = []
        pending: tuple[EventRows, list[int]] = (self.batch.rows, self.batch.indices)
        while len(pending[0]):
            rows = pending[0]
            claims: Claims = {}
            for i, job in enumerate(rows.job_id):
                if rows.is_scheduler(i):
                    continue
                claim = cache.get(job)
                if claim is None or (claim[1] is None and self._team(rows.team[i]) is not None):
                    self._reset()
                    return None
                claims[job] = claim
            admitted, _ = self._decide(*pending, claims)
            kept.append(admitted)
            assert self._pending is not None
            pending = self._pending
        return EventRows.concat(kept)

    def _all_kept(self, cache: ClaimCache) -> bool:
        """Whether every row joins the job its cached claim holds as it is: the claim's
        model, and its team or none (what `_decide` keeps without moving or rejecting
        anything). The usual batch of a running job; any other goes the whole way."""
        rows, writer_team, get = self.batch.rows, self.writer_team, cache.get
        for job, model, team in zip(rows.job_id, rows.model, rows.team, strict=True):
            claim = get(job)
            if claim is None or model != claim[0]:
                return False
            if team is None:
                team = writer_team
            if team is not None and team != claim[1]:
                return False
        return True

    def __call__(self, claims: Claims) -> tuple[EventRows, EventRows]:
        """One claim round: the batch's rows first, then the rows the round moved."""
        if self._pending is None:
            self._reset()
            rows, indices = self.batch.rows, self.batch.indices
        else:
            rows, indices = self._pending
        self.seen.update(claims)
        return self._decide(rows, indices, claims)

    def _reset(self) -> None:
        self.rejected, self.moved, self.kept = [], [], 0
        self._pending = None

    def _team(self, team: str | None) -> str | None:
        return self.writer_team if team is None else team

    def _decide(self, rows: EventRows, indices: list[int], claims: Claims
                ) -> tuple[EventRows, EventRows]:
        """(rows to store, rows moved to their team's job, to be claimed next)."""
        kept: list[int] = []
        moved: list[int] = []
        moved_jobs: list[str] = []
        for i, (index, job, model, team) in enumerate(zip(
                indices, rows.job_id, rows.model, rows.team, strict=True)):
            if rows.is_scheduler(i):
                # The scheduler's events join whatever job the trainer names: its model/team
                # mapping is a guess the trainer's own word overrides (docs/model.md).
                kept.append(i)
                continue
            team = self._team(team)
            claim = claims.get(job)
            if claim is not None and other_teams_claim(job, model, team, claim):
                assert team is not None
                moved_jobs.append(namespaced(job, team))
                self.moved.append({"index": index, "job_id": moved_jobs[-1]})
                moved.append(i)
                continue
            error = conflict(job, model, team, claim)
            if error is None:
                kept.append(i)
            else:
                self.rejected.append({"index": index, "error": error})
        moved_rows = (replace(rows.take(moved), job_id=moved_jobs) if moved else EMPTY)
        self._pending = (moved_rows, [indices[i] for i in moved])
        self.kept += len(kept)
        return (rows if len(kept) == len(rows) else rows.take(kept)), moved_rows
