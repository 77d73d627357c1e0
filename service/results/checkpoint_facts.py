"""Writing the per-attempt checkpoint facts (table `checkpoint_attempts`) with a job's results.

Called by the aggregator inside the transaction that replaces the job's other rows, so the
facts advice reads always belong to the results the rest of the service shows. Never
commits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlalchemy import Connection, text

from ett_core import JobComputation
from service.store.results import us_to_dt

_INSERT = text("""
    INSERT INTO checkpoint_attempts (job_id, attempt, model, team, started_at, gpus, held_us,
        interrupted, blocking_save_us, durable_checkpoints, intervals_us, lost_progress_us,
        ttr_us)
    VALUES (:job_id, :attempt, :model, :team, :started_at, :gpus, :held_us, :interrupted,
        :blocking_save_us, :durable_checkpoints, :intervals_us, :lost_progress_us, :ttr_us)
""")


def replace_checkpoint_facts(conn: Connection, job_ids: Sequence[str],
                             computed: Mapping[str, JobComputation]) -> None:
    """Replace the facts of `job_ids` by those of `computed` (a job absent from it keeps none)."""
    if not job_ids:
        return
    conn.execute(text("DELETE FROM checkpoint_attempts WHERE job_id = ANY(:ids)"),
                 {"ids": list(job_ids)})
    rows = []
    for job_id in job_ids:
        comp = computed.get(job_id)
        if comp is None:
            continue
        res = comp.result
        rows.extend({
            "job_id": job_id, "attempt": c.attempt, "model": res.model, "team": res.team,
            "started_at": us_to_dt(c.start_us), "gpus": c.gpus, "held_us": c.held_us,
            "interrupted": c.interrupted, "blocking_save_us": c.blocking_save_us,
            "durable_checkpoints": c.durable_checkpoints, "intervals_us": list(c.intervals_us),
            "lost_progress_us": c.lost_progress_us, "ttr_us": c.ttr_us,
        } for c in comp.checkpoints)
    if rows:
        conn.execute(_INSERT, rows)
