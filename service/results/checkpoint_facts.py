"""Writing the per-attempt checkpoint facts (table `checkpoint_attempts`) with a job's results.

Called by the aggregator inside the transaction that replaces the job's other rows, so the
facts advice reads always belong to the results the rest of the service shows. Rows go in
by COPY, like the job's other rows: a pass rewrites every running job's facts. Never commits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlalchemy import Connection, text

from ett_core import JobComputation
from service.store import copy_text as fmt

COLUMNS = ("job_id", "attempt", "model", "team", "started_at", "gpus", "held_us",
           "interrupted", "blocking_save_us", "durable_checkpoints", "intervals_us",
           "lost_progress_us", "ttr_us")


def fact_lines(job_id: str, comp: JobComputation, ts: fmt.Timestamps) -> list[str]:
    """The job's rows as COPY text lines."""
    res = comp.result
    head = f"{fmt.text(job_id)}\t"
    labels = f"{fmt.text(res.model)}\t{fmt.text(res.team)}\t"
    return [
        f"{head}{c.attempt}\t{labels}{ts(c.start_us)}\t{c.gpus}\t{c.held_us}\t"
        f"{fmt.boolean(c.interrupted)}\t{c.blocking_save_us}\t{c.durable_checkpoints}\t"
        f"{{{','.join(map(str, c.intervals_us))}}}\t{c.lost_progress_us}\t{fmt.opt(c.ttr_us)}\n"
        for c in comp.checkpoints
    ]


def replace_checkpoint_facts(conn: Connection, job_ids: Sequence[str],
                             computed: Mapping[str, JobComputation]) -> None:
    """Replace the facts of `job_ids` by those of `computed` (a job absent from it keeps none)."""
    if not job_ids:
        return
    conn.execute(text("DELETE FROM checkpoint_attempts WHERE job_id = ANY(:ids)"),
                 {"ids": list(job_ids)})
    ts = fmt.Timestamps()
    lines = [line for job_id in job_ids if (comp := computed.get(job_id)) is not None
             for line in fact_lines(job_id, comp, ts)]
    raw = conn.connection.driver_connection
    with raw.cursor() as cur:  # type: ignore[union-attr]
        fmt.copy_rows(cur, "checkpoint_attempts", COLUMNS, lines)
