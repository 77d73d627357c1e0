"""SQL for the aggregator: load events, replace job results (the shared rollups they move:
`result_rows.apply_deltas`).

Never commits: `service.aggregate` owns each transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from itertools import groupby
from operator import itemgetter
from typing import Any

import orjson
from psycopg.types.json import set_json_loads
from sqlalchemy import Connection, text

from ett_core import Event
from ett_core.events import ATTRS_READ, NO_ATTRS
from ett_core.instants import us_to_dt
from ett_core.stalls import STEP_ATTR

from . import copy_text as fmt
from .result_rows import Deltas, JobRows, RollupKey, RowFormatter

# Advisory-lock namespace for "this job is being recomputed" (two-int form, so it can
# never collide with the migration lock, which uses the one-bigint form).
JOB_LOCK_CLASS = 0x455454  # "ETT"


# For each chunk's transaction (`service.aggregate`):
# - everything it writes is derived from events, and it consumes its queue rows: if a
#   database crash loses it after commit, the rows come back and the next pass redoes it,
#   so the commit need not wait for the WAL flush;
# - its reads are small index scans, and passes already run side by side (--workers): a
#   parallel plan only adds worker processes to start (the event load chose one);
# - its event reads merge the key index's scans, which give each partition's rows in job
#   and time order: the planner overestimates a chunk's events (118k rows for 23k) and
#   would pick bitmap scans and a sort that spills to disk, at twice the server's CPU
#   (docs/performance.md, aggregation round 6). Sorting is off for the whole transaction,
#   not around each read, to cost no round trip of its own: the chunk's other statements
#   have no sort to avoid or must sort anyway (the setting weighs plans, forbids none).
_CHUNK_SETTINGS = ("SELECT set_config('synchronous_commit', 'off', true),"
                   " set_config('max_parallel_workers_per_gather', '0', true),"
                   " set_config('enable_sort', 'off', true)")


def set_chunk_settings(conn: Connection) -> None:
    """For the rest of this transaction: commit without waiting for the WAL flush, plan
    without parallel workers, and read events merged from the key index, not sorted."""
    conn.exec_driver_sql(_CHUNK_SETTINGS)


def queued_jobs(conn: Connection) -> dict[str, datetime]:
    """Jobs with unprocessed events, with the time their oldest mark was queued."""
    rows = conn.execute(text("SELECT job_id, min(marked_at) FROM dirty_jobs GROUP BY job_id"))
    return {job_id: marked for job_id, marked in rows}


def running_jobs(conn: Connection) -> list[str]:
    """Jobs whose result depends on `now` (running attempts, pending heartbeat timeouts)."""
    return [r[0] for r in conn.execute(text("SELECT job_id FROM jobs WHERE open"))]


# Every job id after `:after`, from `events` and `jobs`: a loose index scan over `events`
# (one probe per job, not per event) from a starting job, which PostgreSQL runs only as far
# as the outer query fetches. The order is the database's (its collation), never Python's,
# so that the next page starts exactly where this one ended.
_JOB_IDS_AFTER = """
    WITH RECURSIVE j(id) AS (
        SELECT min(job_id) FROM events WHERE job_id > :after
        UNION ALL
        SELECT (SELECT min(job_id) FROM events WHERE job_id > j.id)
        FROM j WHERE j.id IS NOT NULL
    )"""
# A page: each source gives its first :n jobs, so the union's first :n are complete. Ids
# only: the workers need nothing else, and a probe of each job's model would cost a third
# of the page.
_JOBS_AFTER = _JOB_IDS_AFTER + """
    SELECT id FROM ((SELECT id FROM j WHERE id IS NOT NULL LIMIT :n)
                    UNION (SELECT job_id FROM jobs WHERE job_id > :after ORDER BY job_id LIMIT :n)
                   ) AS s
    ORDER BY id LIMIT :n
"""


def job_ids_after(conn: Connection, after: str, limit: int) -> list[str]:
    """The first `limit` jobs after `after` in the database's job order (with events or
    results); the last one is the next page's `after`. A recompute of everything reads
    pages, never the whole fleet's job list (it grows with history)."""
    return list(conn.execute(text(_JOBS_AFTER), {"after": after, "n": limit}).scalars())


def count_jobs(conn: Connection) -> int:
    """How many jobs a recompute of everything covers (for its progress bar)."""
    return conn.execute(text(
        _JOB_IDS_AFTER + " SELECT count(*) FROM (SELECT id FROM j WHERE id IS NOT NULL"
        " UNION SELECT job_id FROM jobs) s"), {"after": ""}).scalar_one()


def computed_at(conn: Connection, job_ids: Sequence[str]) -> dict[str, datetime]:
    """When the stored result of each of `job_ids` (those that have one) was computed."""
    rows = conn.execute(text("SELECT job_id, computed_at FROM jobs WHERE job_id = ANY(:ids)"),
                        {"ids": list(job_ids)})
    return {job_id: at for job_id, at in rows}


def try_lock_jobs(conn: Connection, job_ids: Sequence[str]) -> list[str]:
    """Take the per-job transaction locks that are free; another aggregator holds the rest."""
    rows = conn.execute(
        text(
            "SELECT j, pg_try_advisory_xact_lock(:cls, hashtext(j))"
            " FROM unnest(CAST(:ids AS text[])) AS j ORDER BY j"
        ),
        {"cls": JOB_LOCK_CLASS, "ids": list(job_ids)},
    )
    return [job for job, locked in rows if locked]


def queue_rows(conn: Connection, job_ids: Sequence[str]
               ) -> list[tuple[str, int, datetime | None]]:
    """The queue rows this pass consumes, read *before* the events: job, seq and the
    batch's earliest event instant for the job (to the second; None when not known).

    Every row visible now belongs to a committed batch whose events the next statement
    sees; rows committed later keep their jobs queued for the next pass.
    """
    rows = conn.execute(
        text("SELECT job_id, seq, first_ts FROM dirty_jobs WHERE job_id = ANY(:ids)"),
        {"ids": list(job_ids)},
    )
    return [(r[0], r[1], r[2]) for r in rows]


_JOB_ID = itemgetter(2)
# Attrs only where the core reads them: most events are heartbeats, whose only attr the
# core reads is the step counter (rank 0's), so the rest of their attrs is never decoded.
_LOAD_EVENTS = f"""
    SELECT event_id::text, (extract(epoch FROM ts) * 1000000)::bigint, job_id, attempt,
           model, type, phase, gpus, team, rank,
           CASE WHEN type IN ({", ".join(f"'{t}'" for t in sorted(ATTRS_READ))}) THEN attrs
                WHEN attrs ? '{STEP_ATTR}' AND coalesce(rank, 0) = 0
                THEN jsonb_build_object('{STEP_ATTR}', attrs -> '{STEP_ATTR}') END
    FROM events WHERE job_id = ANY(%(ids)s) ORDER BY job_id, ts
"""


def _event_row(_cursor: object) -> Callable[[Sequence[Any]], Event]:
    # psycopg calls this per row: the row, in Event's field order, becomes the Event as is.
    make = Event._make
    return lambda row: make(row) if row[10] is not None else make((*row[:10], NO_ATTRS))


# The events of each job from its instant on (a resumed job's, ett_core.resume): one index
# range per job and partition. OFFSET 0 keeps the subquery a subquery, run once per job:
# pulled up into a join, it can become a hash join over every event of the table. The
# earliest instant as a constant lets the planner see how few rows follow it (and skip the
# partitions before it).
_LOAD_EVENTS_FROM = _LOAD_EVENTS.replace(
    "FROM events WHERE job_id = ANY(%(ids)s) ORDER BY job_id, ts",
    "FROM unnest(%(ids)s::text[], %(froms)s::timestamptz[]) AS f(job, since)"
    " CROSS JOIN LATERAL (SELECT * FROM events e WHERE e.job_id = f.job AND e.ts >= f.since"
    " AND e.ts >= %(earliest)s OFFSET 0) AS events ORDER BY job_id, ts")


def load_events_from(conn: Connection, since: Mapping[str, int]) -> dict[str, list[Event]]:
    """Each job's events at or after its instant (epoch microseconds), in time order."""
    if not since:
        return {}
    jobs = sorted(since)
    return dict(_events_by_job(conn, _LOAD_EVENTS_FROM, {
        "ids": jobs, "froms": [us_to_dt(since[j]) for j in jobs],
        "earliest": us_to_dt(min(since.values()))}))


def _events_by_job(conn: Connection, statement: str, params: Mapping[str, Any],
                   page: int | None = None) -> Iterator[tuple[str, list[Event]]]:
    """The events a statement returns in job order, a job at a time; with `page`, streamed
    in pages of that many rows."""
    # The hottest read of a pass: a plain psycopg cursor that builds the Events itself (no
    # per-row SQLAlchemy Row, no unpacking in Python), orjson for the attrs, in the caller's
    # transaction (same DBAPI connection). Rows come in job order, so grouping is one scan.
    raw = conn.connection.driver_connection
    with raw.cursor(row_factory=_event_row) as cur:  # type: ignore[union-attr]
        set_json_loads(orjson.loads, cur)
        if page is None:
            rows: Iterable[Event] = cur.execute(statement, params)
        else:
            rows = cur.stream(statement, params, size=page)
        for job_id, events in groupby(rows, _JOB_ID):
            yield job_id, list(events)


_STREAM_ROWS = 10_000


def stream_events(conn: Connection, job_ids: Sequence[str]) -> Iterator[tuple[str, list[Event]]]:
    """`load_events` one job at a time: a chunk of long-running jobs (a month of heartbeats
    each) would otherwise hold every job's events at once. Rows arrive in pages of
    `_STREAM_ROWS` (libpq's chunked rows: the same statement and plan, no server-side
    cursor); nothing else may use the connection until the iterator is exhausted. In a
    chunk's transaction (`set_chunk_settings`) the read is a merge of the key's scans."""
    yield from _events_by_job(conn, _LOAD_EVENTS, {"ids": list(job_ids)}, _STREAM_ROWS)


def load_events(conn: Connection, job_ids: Sequence[str]) -> dict[str, list[Event]]:
    """Every event of `job_ids`, by job, in the caller's transaction."""
    return dict(stream_events(conn, job_ids))


# The old rollup rows come back from their DELETE, summed per fleet cell: one index scan
# instead of a read and then a delete, and far fewer rows for Python to walk.
_DELETE_ROLLUP = """
    WITH gone AS (
        DELETE FROM rollup_hourly WHERE job_id = ANY(%(ids)s)
        RETURNING hour, model, team, component, phase, owner, settled_gpu_us, unsettled_gpu_us)
    SELECT (extract(epoch FROM hour) * 1000000)::bigint, model, team, component, phase, owner,
           sum(settled_gpu_us), sum(unsettled_gpu_us)
    FROM gone GROUP BY hour, model, team, component, phase, owner
"""


def delete_job_rows(conn: Connection, job_ids: Sequence[str], deltas: Deltas) -> None:
    """Delete every stored row of the jobs; subtract their rollup cells in the deltas."""
    if not job_ids:
        return
    params = {"ids": list(job_ids)}
    with conn.connection.driver_connection.cursor() as cur:  # type: ignore[union-attr]
        cur.execute(_DELETE_ROLLUP, params)
        for hour, model, team, component, phase, owner, settled, unsettled in cur:
            # NUMERIC: the jobs of a chunk summed can outgrow a bigint.
            deltas.add(hour, model, team, component, phase, owner, -int(settled),
                       -int(unsettled))
        for table in ("segments", "attempts", "jobs"):
            cur.execute(f"DELETE FROM {table} WHERE job_id = ANY(%(ids)s)", params)


_JOB_COLUMNS = ("job_id", "model", "team", "state", "first_at", "last_at", "open",
                "held_gpu_seconds", "effective_gpu_seconds", "at_risk_gpu_seconds", "nof",
                "tts_seconds", "ttr_seconds", "ttr_causes", "unknown_phase_events", "result",
                "computed_at")
_ATTEMPT_COLUMNS = ("job_id", "attempt", "allocated_at", "released_at", "gpus", "end_cause",
                    "held_seconds", "startup_seconds")
_SEGMENT_COLUMNS = ("job_id", "seq", "hour", "attempt", "start_at", "end_at", "gpus", "model",
                    "team", "component", "phase", "owner", "settled")
_ROLLUP_COLUMNS = ("job_id", "hour", "model", "team", "component", "phase", "owner",
                   "settled_gpu_us", "unsettled_gpu_us")


def insert_jobs(conn: Connection, jobs: Sequence[JobRows], formatter: RowFormatter,
                deltas: Deltas) -> None:
    """Insert every row of each job (its old rows already deleted); the deltas add their
    rollup rows (the database sums them, `result_rows.apply_deltas`)."""
    attempts, segments, rollups = [], [], []
    for rows in jobs:
        attempts.extend(rows.attempt_lines.values())
        segments.extend(rows.segment_lines)
        rollups.extend(formatter.rollup_line(rows, key) for key in rows.rollup)
    _copy_all(conn, [r.job_line for r in jobs], attempts, segments, rollups)
    deltas.inserted.extend(r.job_id for r in jobs)


def update_jobs(conn: Connection, pairs: Sequence[tuple[JobRows, JobRows]],
                formatter: RowFormatter, deltas: Deltas) -> None:
    """Rewrite what changed from `old` (the rows stored now) to `new`, for each pair.

    A running job's new rows mostly repeat the old: only its last segments, the rollup
    cells of the current hour and its attempt grow. Segments compare by position (seq),
    rollup cells by key, attempts by number; the job row itself always changes.
    """
    seg_jobs, seg_seqs, seg_lines = [], [], []
    att_jobs, att_nums, att_lines = [], [], []
    roll_keys, roll_lines = [], []
    for old, new in pairs:
        job = new.job_id
        # Rows derived from `old` (a resumed job) say which lines and cells can differ.
        since = new.since if new.since is not None and new.since[0] is old else None
        same = since[1] if since is not None else 0
        a, b = old.segment_lines, new.segment_lines
        limit = min(len(a), len(b))
        while same < limit and a[same] == b[same]:
            same += 1
        # Each line by its key: a range of seqs per job made the planner scan every
        # segment of every job (a hash join), and the table grows with history.
        stale = range(same, len(old.segment_lines))
        seg_jobs.extend([job] * len(stale))
        seg_seqs.extend(stale)
        seg_lines.extend(new.segment_lines[same:])
        for num in old.attempt_lines.keys() | new.attempt_lines.keys():
            line = new.attempt_lines.get(num)
            if line != old.attempt_lines.get(num):
                if num in old.attempt_lines:
                    att_jobs.append(job)
                    att_nums.append(num)
                if line is not None:
                    att_lines.append(line)
        for key in since[2] if since is not None else old.rollup.keys() | new.rollup.keys():
            before, after = old.rollup.get(key), new.rollup.get(key)
            if before == after:
                continue
            if before is not None:
                hour, component, phase, owner = key
                roll_keys.append({"job_id": job, "hour": formatter.ts(hour),
                                  "component": component, "phase": phase, "owner": owner})
                _add(deltas, old, key, before, -1)
            if after is not None:
                roll_lines.append(formatter.rollup_line(new, key))
                _add(deltas, new, key, after, 1)
    ids = [new.job_id for _old, new in pairs]
    if ids:
        conn.execute(text("DELETE FROM jobs WHERE job_id = ANY(:ids)"), {"ids": ids})
    if seg_jobs:
        conn.execute(text(
            "DELETE FROM segments s USING unnest(CAST(:jobs AS text[]), CAST(:seqs AS int[]))"
            " AS d(job_id, seq) WHERE s.job_id = d.job_id AND s.seq = d.seq"),
            {"jobs": seg_jobs, "seqs": seg_seqs})
    if att_jobs:
        conn.execute(text(
            "DELETE FROM attempts a USING unnest(CAST(:jobs AS text[]), CAST(:nums AS int[]))"
            " AS d(job_id, attempt) WHERE a.job_id = d.job_id AND a.attempt = d.attempt"),
            {"jobs": att_jobs, "nums": att_nums})
    if roll_keys:
        conn.execute(text(
            "DELETE FROM rollup_hourly r USING json_to_recordset(CAST(:keys AS json))"
            " AS d(job_id text, hour timestamptz, component text, phase text, owner text)"
            " WHERE r.job_id = d.job_id AND r.hour = d.hour AND r.component = d.component"
            " AND r.phase = d.phase AND r.owner = d.owner"),
            {"keys": orjson.dumps(roll_keys).decode()})
    _copy_all(conn, [new.job_line for _old, new in pairs], att_lines, seg_lines, roll_lines)


def _add(deltas: Deltas, rows: JobRows, key: RollupKey, values: tuple[int, int],
         sign: int) -> None:
    hour, component, phase, owner = key
    settled, unsettled = values
    deltas.add(hour, rows.model, rows.team, component, phase, owner, sign * settled,
               sign * unsettled)


def _copy_all(conn: Connection, jobs: list[str], attempts: list[str], segments: list[str],
              rollups: list[str]) -> None:
    raw = conn.connection.driver_connection
    with raw.cursor() as cur:  # type: ignore[union-attr]
        fmt.copy_rows(cur, "jobs", _JOB_COLUMNS, jobs)
        fmt.copy_rows(cur, "attempts", _ATTEMPT_COLUMNS, attempts)
        fmt.copy_rows(cur, "segments", _SEGMENT_COLUMNS, segments)
        fmt.copy_rows(cur, "rollup_hourly", _ROLLUP_COLUMNS, rollups)


def requeue(conn: Connection, firsts: Mapping[str, int]) -> None:
    """Queue the jobs for the next pass again (their events are not all due yet), each
    with the earliest instant not due (epoch microseconds; stored to the second)."""
    if firsts:
        jobs = sorted(firsts)
        conn.execute(text(
            "INSERT INTO dirty_jobs (job_id, first_ts) SELECT j, date_trunc('second', f)"
            " FROM unnest(CAST(:j AS text[]), CAST(:f AS timestamptz[])) AS u(j, f)"),
            {"j": jobs, "f": [us_to_dt(firsts[j]) for j in jobs]})


def consume_queue_rows(conn: Connection, seqs: Sequence[int]) -> None:
    if seqs:
        conn.execute(text("DELETE FROM dirty_jobs WHERE seq = ANY(:s)"), {"s": list(seqs)})
