"""Ownership (docs/model.md, "Ownership"): a job's model and team are fixed by its first
stored event, so a writer can never move another team's job or inject events into it; and
a claim binds only the claiming team, so no writer can take a job id away from another.

The owners are claimed and read in the transaction that stores the batch
(`store.events.CLAIM_SQL`); this check then decides each event against them, and words the
rejection so that the writer sees whose job it hit. An event of team B for a job id that
team A claimed first is neither rejected nor merged: it belongs to team B's own job, named
`{job_id}@B` (`@` is outside the names a writer may send, so nobody can claim that name
first), which is claimed in turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from service.store.copy_text import is_scheduler_line

from .batch import ValidatedBatch

Owners = dict[str, tuple[str, str | None]]
_NULL = "\\N"
NAMESPACE_SEP = "@"


def namespaced(job_id: str, team: str) -> str:
    """The name of team `team`'s job `job_id` when another team claimed the id first."""
    return f"{job_id}{NAMESPACE_SEP}{team}"


def conflict(job_id: str, model: str, team: str | None,
             owner: tuple[str, str | None] | None) -> str | None:
    """Why an event of `model`/`team` may not join the job `owner` holds; None if it may."""
    if owner is None:
        return None
    owned_model, owned_team = owner
    if model != owned_model or (team is not None and owned_team is not None
                                and team != owned_team):
        return (f"job_id: job {job_id!r} belongs to model {owned_model!r}"
                f" (team {owned_team!r}); this event gives model {model!r} (team {team!r}),"
                " and a job's model and team never change")
    return None


def other_teams_claim(job_id: str, model: str, team: str | None,
                      owner: tuple[str, str | None]) -> bool:
    """Whether the job id is another team's: the event's team is known and differs from
    the owner's, or the owner has no team and another model (its claim binds no team)."""
    if team is None or NAMESPACE_SEP in job_id:
        return False
    owned_model, owned_team = owner
    return team != owned_team if owned_team is not None else model != owned_model


class OwnerCache:
    """Owners already committed, which never change: a job's model is final from its first
    event, its team once it is set. A batch whose jobs are all known here (and names no team
    for a job that has none yet) is decided without claiming, in the one-statement path;
    the claim's transaction cost single-event posts three more round trips."""

    def __init__(self, max_jobs: int = 100_000) -> None:
        self.max_jobs = max_jobs
        self._owners: Owners = {}

    def get(self, job_id: str) -> tuple[str, str | None] | None:
        return self._owners.get(job_id)

    def learn(self, owners: Owners) -> None:
        """Call only once the transaction that read `owners` has committed."""
        if len(self._owners) + len(owners) > self.max_jobs:
            self._owners.clear()  # crude, but bounded; a miss only costs the claim
        self._owners.update(owners)


class OwnershipCheck:
    """The `admit` callback of `store.events.store_rows` for one validated batch.

    `writer_team` is the team a line naming none claims for (the writer token's). Keeps
    what it refused in `rejected` (index and message, as the 202 answer lists them), the
    lines it moved to their team's own job in `moved` (index and the job's name), and the
    owners it was given in `seen` (for the cache, once they are committed).
    """

    def __init__(self, batch: ValidatedBatch, writer_team: str | None = None) -> None:
        self.batch = batch
        self.writer_team = writer_team
        self.rejected: list[dict[str, Any]] = []
        self.moved: list[dict[str, Any]] = []
        self.kept = len(batch.lines)
        self.seen: Owners = {}
        # The lines of the next claim round and their indices in the batch (None: the
        # batch's own, the first round).
        self._pending: tuple[list[str], list[int]] | None = None

    def from_cache(self, cache: OwnerCache) -> Sequence[str] | None:
        """The lines to store if `cache` decides every one; None if the database must."""
        self._reset()
        kept: list[str] = []
        pending: tuple[Sequence[str], Sequence[int]] = (self.batch.lines, self.batch.indices)
        while pending[0]:
            owners: Owners = {}
            for line in pending[0]:
                if is_scheduler_line(line):
                    continue
                fields = line.split("\t", 9)
                owner = cache.get(fields[2])
                if owner is None or (owner[1] is None and self._team(fields) is not None):
                    self._reset()
                    return None
                owners[fields[2]] = owner
            admitted, _ = self._decide(*pending, owners)
            kept.extend(admitted)
            assert self._pending is not None
            pending = self._pending
        return kept

    def __call__(self, owners: Owners) -> tuple[Sequence[str], Sequence[str]]:
        """One claim round: the batch's lines first, then the lines the round moved."""
        if self._pending is None:
            self._reset()
            lines, indices = self.batch.lines, self.batch.indices
        else:
            lines, indices = self._pending
        self.seen.update(owners)
        return self._decide(lines, indices, owners)

    def _reset(self) -> None:
        self.rejected, self.moved, self.kept = [], [], 0
        self._pending = None

    def _team(self, fields: list[str]) -> str | None:
        return self.writer_team if fields[8] == _NULL else fields[8]

    def _decide(self, lines: Sequence[str], indices: Sequence[int], owners: Owners
                ) -> tuple[list[str], list[str]]:
        """(lines to store, lines moved to their team's job, to be claimed next)."""
        kept: list[str] = []
        moved: list[str] = []
        moved_at: list[int] = []
        for index, line in zip(indices, lines, strict=True):
            if is_scheduler_line(line):
                # The scheduler's events join whatever job the trainer names: its model/team
                # mapping is a guess the trainer's own word overrides (docs/model.md).
                kept.append(line)
                continue
            fields = line.split("\t", 9)
            job, model, team = fields[2], fields[4], self._team(fields)
            owner = owners.get(job)
            if owner is not None and other_teams_claim(job, model, team, owner):
                assert team is not None
                fields[2] = namespaced(job, team)
                self.moved.append({"index": index, "job_id": fields[2]})
                moved.append("\t".join(fields))
                moved_at.append(index)
                continue
            error = conflict(job, model, team, owner)
            if error is None:
                kept.append(line)
            else:
                self.rejected.append({"index": index, "error": error})
        self._pending = (moved, moved_at)
        self.kept += len(kept)
        return kept, moved
