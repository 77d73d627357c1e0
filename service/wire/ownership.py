"""Ownership (docs/model.md, "Ownership"): a job's model and team are fixed by its first
stored event, so a writer can never move another team's job or inject events into it.

The owners are claimed and read in the transaction that stores the batch
(`store.events.CLAIM_SQL`); this check then decides each event against them, and words the
rejection so that the writer sees whose job it hit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from service.store.copy_text import is_scheduler_line

from .batch import ValidatedBatch

Owners = dict[str, tuple[str, str | None]]
_NULL = "\\N"


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

    Keeps what it refused in `rejected` (index and message, as the 202 answer lists them),
    and the owners it was given in `seen` (for the cache, once they are committed).
    """

    def __init__(self, batch: ValidatedBatch) -> None:
        self.batch = batch
        self.rejected: list[dict[str, Any]] = []
        self.kept = len(batch.lines)
        self.seen: Owners = {}

    def from_cache(self, cache: OwnerCache) -> Sequence[str] | None:
        """The lines to store if `cache` decides every one; None if the database must."""
        owners: Owners = {}
        for line in self.batch.lines:
            if is_scheduler_line(line):
                continue
            fields = line.split("\t", 9)
            owner = cache.get(fields[2])
            if owner is None or (owner[1] is None and fields[8] != _NULL):
                return None
            owners[fields[2]] = owner
        return self._decide(owners)

    def __call__(self, owners: Owners) -> Sequence[str]:
        self.seen = owners
        return self._decide(owners)

    def _decide(self, owners: Owners) -> Sequence[str]:
        kept: list[str] = []
        self.rejected = []
        for index, line in zip(self.batch.indices, self.batch.lines, strict=True):
            fields = line.split("\t", 9)
            team = None if fields[8] == _NULL else fields[8]
            # The scheduler's events join whatever job the trainer names: its model/team
            # mapping is a guess the trainer's own word overrides (docs/model.md).
            error = None if is_scheduler_line(line) else conflict(
                fields[2], fields[4], team, owners.get(fields[2]))
            if error is None:
                kept.append(line)
            else:
                self.rejected.append({"index": index, "error": error})
        self.kept = len(kept)
        return kept
