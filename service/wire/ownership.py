"""Ownership (docs/model.md, "Ownership"): a job's model and team are fixed by its first
stored event, so a writer can never move another team's job or inject events into it.

The owners are claimed and read in the transaction that stores the batch
(`store.events.CLAIM_SQL`); this check then decides each event against them, and words the
rejection so that the writer sees whose job it hit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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


class OwnershipCheck:
    """The `admit` callback of `store.events.store_rows` for one validated batch.

    Keeps what it refused in `rejected` (index and message, as the 202 answer lists them).
    """

    def __init__(self, batch: ValidatedBatch) -> None:
        self.batch = batch
        self.rejected: list[dict[str, Any]] = []
        self.kept = len(batch.lines)

    def __call__(self, owners: Owners) -> Sequence[str]:
        kept: list[str] = []
        self.rejected = []
        for index, line in zip(self.batch.indices, self.batch.lines, strict=True):
            fields = line.split("\t", 9)
            team = None if fields[8] == _NULL else fields[8]
            error = conflict(fields[2], fields[4], team, owners.get(fields[2]))
            if error is None:
                kept.append(line)
            else:
                self.rejected.append({"index": index, "error": error})
        self.kept = len(kept)
        return kept
