"""Storing validated events: exactly once per `event_id`, with their jobs queued for the
aggregator in the same transaction. Never commits a transaction it did not begin.

A batch of `COPY_MIN_ROWS` or more is COPYed straight into `events` (sorted by id) in a
transaction, its jobs queued by a second statement. That is the database's cheapest way in:
the insert-with-ON-CONFLICT statement below cost PostgreSQL ~10.5 ms per 1000 events
against ~5.9 ms for COPY (docs/performance.md). COPY has no ON CONFLICT, so it is
optimistic: when an id is already stored (a client's retry) or arrives concurrently, the
unique index aborts the COPY, the transaction (or savepoint) rolls back, and the batch is
stored again by the statement that skips what is there. Sorting by id keeps two batches that
share ids from deadlocking; if one happens anyway, the same fallback applies.

Smaller batches (single events above all) take the statement at once: one round trip.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import orjson
import psycopg
from psycopg import errors as pg_errors

COLUMNS = ("event_id", "ts", "job_id", "attempt", "model", "type", "phase", "gpus", "team",
           "rank", "attrs", "extra")
COPY_SQL = f"COPY events ({', '.join(COLUMNS)}) FROM STDIN"
COPY_MIN_ROWS = 32
# Names never hold a quote or a backslash (wire.NAME_RE), so quoting each is enough; quoted,
# a job called "null" stays a string.
QUEUE_SQL = "INSERT INTO dirty_jobs (job_id) SELECT unnest(CAST(%(jobs)s AS text[])) ORDER BY 1"

# The batch travels as one JSON array of row arrays, unpacked server-side (binding one array
# per column instead spent ~40% of the ingest process's CPU in psycopg's pure-Python array
# dumpers). ORDER BY event_id: see the module docstring. The count of new events is the
# answer, and their jobs are queued in the same statement.
INSERT_SQL = """
    WITH ins AS (
        INSERT INTO events (event_id, ts, job_id, attempt, model, type, phase, gpus, team,
                            rank, attrs, extra)
        SELECT (r->>0)::uuid, (r->>1)::timestamptz, r->>2, (r->>3)::int, r->>4, r->>5,
               r->>6, (r->>7)::int, r->>8, (r->>9)::int, (r->>10)::jsonb, (r->>11)::jsonb
        FROM json_array_elements(CAST(%(rows)s AS json)) AS r
        ORDER BY 1
        ON CONFLICT (event_id) DO NOTHING
        RETURNING job_id
    ), dirty AS (
        INSERT INTO dirty_jobs (job_id) SELECT DISTINCT job_id FROM ins ORDER BY 1
    )
    SELECT count(*) FROM ins
"""

_RETRY_AS_INSERT = (pg_errors.UniqueViolation, pg_errors.DeadlockDetected)

# Each job's owner is its first stored event's model and team (docs/model.md, "Ownership").
# The batch claims its jobs first: a new job takes the batch's model and team, a stored one
# keeps its own (a team it lacked is filled in by an event of its model). The upsert row-locks
# each job's owner until commit, so two first batches for one job cannot both win, and it
# returns every job's owner, inserted or not, in the one statement.
CLAIM_SQL = """
    INSERT INTO job_owners AS o (job_id, model, team)
    SELECT j, m, t FROM unnest(CAST(%(jobs)s AS text[]), CAST(%(models)s AS text[]),
                               CAST(%(teams)s AS text[])) AS u(j, m, t)
    ORDER BY j
    ON CONFLICT (job_id) DO UPDATE SET team = CASE WHEN o.model = EXCLUDED.model
        THEN coalesce(o.team, EXCLUDED.team) ELSE o.team END
    RETURNING job_id, model, team
"""
Owners = dict[str, tuple[str, str | None]]
# Given the owners of the batch's jobs, the lines that may be stored (ingest's ownership check).
Admit = Callable[[Owners], Sequence[str]]


def claims(lines: Iterable[str]) -> dict[str, list[str | None]]:
    """The batch's claim per job: the first line's model, and the first team that lines of
    that model name. Fields: job_id is 3rd, model 5th, team 9th of a COPY line."""
    out: dict[str, list[str | None]] = {}
    for line in lines:
        fields = line.split("\t", 9)
        job, model, team = fields[2], fields[4], _unescape(fields[8])
        claim = out.get(job)
        if claim is None:
            out[job] = [model, team]
        elif claim[1] is None and team is not None and claim[0] == model:
            claim[1] = team
    return out


def _claim_params(lines: Iterable[str]) -> dict[str, list[str | None]]:
    wanted = claims(lines)
    jobs = sorted(wanted)
    return {"jobs": jobs, "models": [wanted[j][0] for j in jobs],
            "teams": [wanted[j][1] for j in jobs]}


def _unescape(field: str) -> str | None:
    return None if field == "\\N" else field.replace("\\\\", "\\")


def rows_json(lines: Iterable[str]) -> str:
    """COPY lines as the INSERT statement's JSON array of row arrays (the fallback path).

    Only a backslash is ever escaped in a line (`copy_text.json_text`; names never hold one), so
    undoing that gives the fields back; PostgreSQL casts the numbers from text.
    """
    return orjson.dumps(
        [[_unescape(f) for f in line[:-1].split("\t")] for line in lines]).decode()


def _copy_payload(lines: Sequence[str]) -> bytes:
    """The lines as one COPY payload, sorted by event_id (see the module docstring)."""
    return "".join(sorted(lines)).encode()


def _queue_params(jobs: Iterable[str]) -> dict[str, str]:
    return {"jobs": "{" + ",".join(f'"{job}"' for job in sorted(jobs)) + "}"}


def store_rows(conn: psycopg.Connection, lines: Sequence[str], jobs: Iterable[str],
               admit: Admit | None = None) -> int:
    """Store the events (COPY text lines, distinct ids) not stored yet and queue their jobs;
    return how many were new. With `admit`, the batch first claims its jobs' owners and
    stores only the lines `admit` keeps, in the same transaction.

    In a transaction the caller began, the COPY runs in a savepoint; in autocommit mode,
    in a transaction of its own.
    """
    if not lines:
        return 0
    if admit is None:
        return _store(conn, lines, jobs)
    with conn.transaction():
        owners = {r[0]: (r[1], r[2]) for r in conn.execute(CLAIM_SQL, _claim_params(lines))}
        return _store(conn, admit(owners), jobs)


def _store(conn: psycopg.Connection, lines: Sequence[str], jobs: Iterable[str]) -> int:
    if not lines:
        return 0
    if len(lines) >= COPY_MIN_ROWS:
        try:
            with conn.transaction(), conn.cursor() as cur:
                with cur.copy(COPY_SQL) as copy:
                    copy.write(_copy_payload(lines))
                cur.execute(QUEUE_SQL, _queue_params(jobs))
            return len(lines)
        except _RETRY_AS_INSERT:
            pass
    row = conn.execute(INSERT_SQL, {"rows": rows_json(lines)}).fetchone()
    assert row is not None
    return int(row[0])


async def store_rows_async(conn: psycopg.AsyncConnection, lines: Sequence[str],
                           jobs: Iterable[str], admit: Admit | None = None) -> int:
    """`store_rows` on an asyncio connection."""
    if not lines:
        return 0
    if admit is None:
        return await _store_async(conn, lines, jobs)
    async with conn.transaction():
        cur = await conn.execute(CLAIM_SQL, _claim_params(lines), prepare=True)
        owners = {r[0]: (r[1], r[2]) for r in await cur.fetchall()}
        return await _store_async(conn, admit(owners), jobs)


async def _store_async(conn: psycopg.AsyncConnection, lines: Sequence[str],
                       jobs: Iterable[str]) -> int:
    if not lines:
        return 0
    if len(lines) >= COPY_MIN_ROWS:
        try:
            async with conn.transaction(), conn.cursor() as cur:
                async with cur.copy(COPY_SQL) as copy:
                    await copy.write(_copy_payload(lines))
                await cur.execute(QUEUE_SQL, _queue_params(jobs))
            return len(lines)
        except _RETRY_AS_INSERT:
            pass
    cur = await conn.execute(INSERT_SQL, {"rows": rows_json(lines)}, prepare=True)
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])
