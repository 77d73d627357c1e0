"""Storing validated events: exactly once per `event_id` within its job (and instant), with
their jobs queued for the aggregator in the same transaction. Never commits a transaction
it did not begin.

A batch of `COPY_MIN_ROWS` or more is COPYed straight into `events` (sorted by id) in a
transaction, its jobs queued by a second statement. That is the database's cheapest way in:
the insert-with-ON-CONFLICT statement below cost PostgreSQL ~10.5 ms per 1000 events
against ~5.9 ms for COPY (docs/performance.md). COPY has no ON CONFLICT, so it is
optimistic: when an id is already stored (a client's retry) or arrives concurrently, the
unique index aborts the COPY, the transaction (or savepoint) rolls back, and the batch is
stored again by the statement that skips what is there. Sorting by id keeps two batches that
share ids from deadlocking; if one happens anyway, the same fallback applies.

On a connection in autocommit mode (the ingest pool's) the COPY, the queue rows and the
transaction around them travel as one simple-protocol query, `BEGIN; INSERT INTO dirty_jobs
...; COPY events ... FROM STDIN; COMMIT`: PostgreSQL runs the statements after the COPY once
its data has ended, so a batch costs two round trips (the query, answered by the COPY's
start; the data, answered by the COMMIT) instead of five (BEGIN, COPY start, COPY end, the
queue statement, COMMIT): each one cost the API ~0.18 ms of CPU in psycopg's asyncio
machinery (docs/performance.md). The answer is read to its end, COMMIT included, before the
count is returned, so nothing is acknowledged that is not committed; a statement that joins
the batch's transaction (a lookup or an ownership claim) is one more statement in the same
script, no extra round trip. psycopg's own cursors refuse a COPY mixed with other
statements, so this one query is driven with psycopg's libpq generators
(`psycopg.generators`, what its cursors are built on).

Smaller batches (single events above all) take the statement at once: one round trip.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import orjson
import psycopg
from psycopg import errors as pg_errors
from psycopg import generators, pq
from psycopg.abc import PQGen
from psycopg.waiting import Wait

from .copy_text import is_scheduler_line

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
#
# A re-sent id is a retry only if its content is what is stored: an event whose job, id and
# instant are stored with other content (another attempt, type, phase...) is another event,
# stored under an id derived from its whole row (so its own retries are duplicates in turn),
# never dropped as a duplicate. Every duplicate reaches this statement (the COPY path falls
# back to it on a conflict); the probe is one primary-key lookup per row.
INSERT_SQL = """
    WITH r AS (
        SELECT (r->>0)::uuid AS event_id, (r->>1)::timestamptz AS ts, r->>2 AS job_id,
               (r->>3)::int AS attempt, r->>4 AS model, r->>5 AS type, r->>6 AS phase,
               (r->>7)::int AS gpus, r->>8 AS team, (r->>9)::int AS rank,
               (r->>10)::jsonb AS attrs, (r->>11)::jsonb AS extra, md5(r::text) AS digest
        FROM json_array_elements(CAST(%(rows)s AS json)) AS r
    ), ins AS (
        INSERT INTO events (event_id, ts, job_id, attempt, model, type, phase, gpus, team,
                            rank, attrs, extra)
        SELECT CASE WHEN EXISTS (
                   SELECT 1 FROM events e
                   WHERE e.job_id = r.job_id AND e.event_id = r.event_id AND e.ts = r.ts
                     AND (e.attempt, e.model, e.type, e.phase, e.gpus, e.team, e.rank, e.attrs)
                         IS DISTINCT FROM (r.attempt, r.model, r.type, r.phase, r.gpus, r.team,
                                           r.rank, r.attrs))
               THEN CAST(r.digest AS uuid) ELSE r.event_id END,
               ts, job_id, attempt, model, type, phase, gpus, team, rank, attrs, extra
        FROM r
        ORDER BY 1
        ON CONFLICT (job_id, event_id, ts) DO NOTHING
        RETURNING job_id
    ), dirty AS (
        INSERT INTO dirty_jobs (job_id) SELECT DISTINCT job_id FROM ins ORDER BY 1
    )
    SELECT count(*) FROM ins
"""

_RETRY_AS_INSERT = (pg_errors.UniqueViolation, pg_errors.DeadlockDetected)
_COPY_IN = pq.ExecStatus.COPY_IN
_FATAL = pq.ExecStatus.FATAL_ERROR
_COPY_CHUNK = 128 * 1024

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
# Given the owners of the batch's jobs: the lines that may be stored, and the lines moved to
# another job (their claims are made next, in the same transaction); ingest's ownership check.
Admit = Callable[[Owners], tuple[Sequence[str], Sequence[str]]]
# A line's job is claimed at most twice: its own id, then (another team's) the id in that
# team's namespace, which only that team's lines reach.
_CLAIM_ROUNDS = 2


def claims(lines: Iterable[str], default_team: str | None = None
           ) -> dict[str, list[str | None]]:
    """The batch's claim per job: the first line's model, and the first team that lines of
    that model name (`default_team`, the writer's, for a line naming none). Fields: job_id
    is 3rd, model 5th, team 9th of a COPY line."""
    out: dict[str, list[str | None]] = {}
    for line in lines:
        if is_scheduler_line(line):
            continue  # a scheduler's mapping never fixes a job's model or team
        fields = line.split("\t", 9)
        job, model, team = fields[2], fields[4], _unescape(fields[8]) or default_team
        claim = out.get(job)
        if claim is None:
            out[job] = [model, team]
        elif claim[1] is None and team is not None and claim[0] == model:
            claim[1] = team
    return out


def _claim_params(lines: Iterable[str], default_team: str | None
                  ) -> dict[str, list[str | None]]:
    wanted = claims(lines, default_team)
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


def _jobs_literal(jobs: Iterable[str]) -> str:
    return "{" + ",".join(f'"{job}"' for job in sorted(jobs)) + "}"


def _queue_params(jobs: Iterable[str]) -> dict[str, str]:
    return {"jobs": _jobs_literal(jobs)}


def copy_script(jobs: Iterable[str]) -> bytes:
    """The one query that stores a batch in its own transaction (see the module docstring).

    Job names match wire.NAME_RE (no quote, no backslash), so the array literal needs no
    further escaping inside the quoted string.
    """
    jobs = sorted(jobs)
    if any("'" in job or '"' in job or "\\" in job for job in jobs):
        # Only a caller that skipped validation gets here; never let a name end the string.
        raise ValueError("a job name holds a quote or a backslash: "
                         + repr([j for j in jobs if set(j) & set("'\"\\")][:3]))
    literal = _jobs_literal(jobs)
    return (f"BEGIN; INSERT INTO dirty_jobs (job_id) SELECT unnest('{literal}'"
            f"::text[]) ORDER BY 1; {COPY_SQL}; COMMIT").encode()


def _raise_first_error(results: Sequence[pq.abc.PGresult], encoding: str) -> None:
    for result in results:
        if result.status == _FATAL:
            raise pg_errors.error_from_result(result, encoding=encoding)


def _script_gen(pgconn: pq.abc.PGconn, script: bytes, payload: bytes,
                encoding: str) -> PQGen[None]:
    """Send the script, the COPY data once the server asks for it, and read the answer to
    its end; raise the first error the server reported."""
    pgconn.send_query(script)
    started = yield from generators.execute(pgconn)
    if not started or started[-1].status != _COPY_IN:
        _raise_first_error(started, encoding)
        raise pg_errors.InternalError("ingest: the COPY did not start")
    # In pieces no larger than psycopg's own COPY writes: a too large one can make
    # put_copy_data refuse it forever (psycopg issue #255).
    data = memoryview(payload)
    for at in range(0, len(data), _COPY_CHUNK):
        yield from generators.copy_to(pgconn, data[at:at + _COPY_CHUNK], flush=False)
    while pgconn.put_copy_end(None) == 0:
        while not (yield Wait.W):
            continue
    yield from generators.send(pgconn)
    ended = yield from generators.fetch_many(pgconn)
    _raise_first_error(ended, encoding)
    # The COPY's answer, then the COMMIT's: only then is the batch stored.
    if len(ended) != 2 or ended[-1].command_status != b"COMMIT":
        raise pg_errors.InternalError("ingest: the batch's transaction did not commit")


def _in_own_transaction(conn: psycopg.Connection | psycopg.AsyncConnection) -> bool:
    return conn.autocommit and conn.info.transaction_status == pq.TransactionStatus.IDLE


def _jobs_of(lines: Iterable[str]) -> set[str]:
    return {line.split("\t", 3)[2] for line in lines}


def store_rows(conn: psycopg.Connection, lines: Sequence[str], jobs: Iterable[str],
               admit: Admit | None = None, default_team: str | None = None) -> int:
    """Store the events (COPY text lines, distinct ids) not stored yet and queue their jobs;
    return how many were new. With `admit`, the batch first claims its jobs' owners (a line
    naming no team claims for `default_team`) and stores only the lines `admit` keeps, in
    the same transaction.

    In a transaction the caller began, the COPY runs in a savepoint; in autocommit mode,
    as the one query of a transaction of its own.
    """
    if not lines:
        return 0
    if admit is None:
        return _store(conn, lines, jobs)
    with conn.transaction():
        kept: list[str] = []
        pending: Sequence[str] = lines
        for _ in range(_CLAIM_ROUNDS):
            if not pending:
                break
            rows = conn.execute(CLAIM_SQL, _claim_params(pending, default_team))
            admitted, pending = admit({r[0]: (r[1], r[2]) for r in rows})
            kept.extend(admitted)
        return _store(conn, kept, _jobs_of(kept))


def _store(conn: psycopg.Connection, lines: Sequence[str], jobs: Iterable[str]) -> int:
    if not lines:
        return 0
    if len(lines) >= COPY_MIN_ROWS:
        try:
            if _in_own_transaction(conn):
                try:
                    conn.wait(_script_gen(conn.pgconn, copy_script(jobs), _copy_payload(lines),
                                          conn.info.encoding))
                finally:
                    if conn.info.transaction_status == pq.TransactionStatus.INERROR:
                        conn.execute("ROLLBACK")
            else:
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
                           jobs: Iterable[str], admit: Admit | None = None,
                           default_team: str | None = None) -> int:
    """`store_rows` on an asyncio connection (the ingest pool's, in autocommit mode)."""
    if not lines:
        return 0
    if admit is None:
        return await _store_async(conn, lines, jobs)
    async with conn.transaction():
        kept: list[str] = []
        pending: Sequence[str] = lines
        for _ in range(_CLAIM_ROUNDS):
            if not pending:
                break
            cur = await conn.execute(CLAIM_SQL, _claim_params(pending, default_team),
                                     prepare=True)
            admitted, pending = admit({r[0]: (r[1], r[2]) for r in await cur.fetchall()})
            kept.extend(admitted)
        return await _store_async(conn, kept, _jobs_of(kept))


async def _store_async(conn: psycopg.AsyncConnection, lines: Sequence[str],
                       jobs: Iterable[str]) -> int:
    if not lines:
        return 0
    if len(lines) >= COPY_MIN_ROWS:
        try:
            if _in_own_transaction(conn):
                try:
                    await conn.wait(_script_gen(conn.pgconn, copy_script(jobs),
                                                _copy_payload(lines), conn.info.encoding))
                finally:
                    if conn.info.transaction_status == pq.TransactionStatus.INERROR:
                        await conn.execute("ROLLBACK")
            else:
                # Inside the ownership claim's transaction: a savepoint, so a retried id
                # falls back to the insert below without losing the claim.
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
