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

The steps of storing a batch are decided once, by `_plan` (a generator that yields each
statement to run and is sent its answer); `store_rows` runs them on a blocking connection,
`store_rows_async` on an asyncio one, so both drivers take exactly the same path.
"""

from __future__ import annotations

import asyncio
import select
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import psycopg
from psycopg import errors as pg_errors
from psycopg import generators, pq
from psycopg.abc import PQGen
from psycopg.waiting import Ready, Wait

from .copy_text import COLUMNS, EventRows, as_text, copy_payload

COPY_SQL = f"COPY events ({', '.join(COLUMNS)}) FROM STDIN"
COPY_MIN_ROWS = 32
# Names never hold a quote or a backslash (wire.NAME_RE), so quoting each is enough; quoted,
# a job called "null" stays a string.
# Each queue row carries its batch's earliest instant for the job, to the second (rounded
# down): the aggregator resumes a running job from its settled prefix only when nothing
# new came before it (ett_core.resume).
QUEUE_SQL = ("INSERT INTO dirty_jobs (job_id, first_ts) SELECT * FROM unnest("
             "CAST(%(jobs)s AS text[]), CAST(%(firsts)s AS timestamptz[])) ORDER BY 1")

# How the fallback statement reads each column from its JSON text (text unless named).
_CASTS = {"event_id": "uuid", "ts": "timestamptz", "attempt": "int", "gpus": "int",
          "rank": "int", "attrs": "jsonb", "extra": "jsonb"}
# An event is its job, id and instant (the unique key); what a retry must repeat is the
# rest but for the unknown fields, which are kept, never compared.
_KEY = ("event_id", "ts", "job_id")
_CONTENT = tuple(c for c in COLUMNS if c not in _KEY and c != "extra")
_UNPACK = ",\n               ".join(
    f"(r->>{i})::{_CASTS[c]} AS {c}" if c in _CASTS else f"r->>{i} AS {c}"
    for i, c in enumerate(COLUMNS))

# The batch travels as one JSON array of row arrays, unpacked server-side (binding one array
# per column instead spent ~40% of the ingest process's CPU in psycopg's pure-Python array
# dumpers). ORDER BY event_id: see the module docstring. The count of new events is the
# answer, and their jobs are queued in the same statement.
#
# A re-sent id is a retry only if its content is what is stored: an event whose job, id and
# instant are stored with other content (another attempt, type, phase...) is another event,
# stored under an id derived from its whole row (so its own retries are duplicates in turn),
# never dropped as a duplicate. Every duplicate reaches this statement (the COPY path falls
# back to it on a conflict), so a retried batch of the largest size must be cheap here.
#
# The stored rows a batch can meet are read once, by job and instant (`near`, one index
# range per distinct pair), and told apart from the batch's by sorting both together (the
# windows of `seen`), never by a lookup per row: given two indexes that start with job_id,
# the planner chose (job_id, ts) for a per-row lookup of (job_id, event_id, ts) and
# filtered on event_id, so a retried batch of one job at a few instants cost n^2 row
# comparisons (5,000 events: past the 10 s ingest statement timeout; docs/performance.md).
# Windows leave it no such choice. Key and content are compared as records, whose equality
# takes NULLs as equal, as IS DISTINCT FROM did. Two rows of the batch itself with one key
# and other contents are two events too: the first in the batch keeps the id (`ord`).
_KEY_ROW = f"ROW({', '.join(_KEY)}) AS key"
_CONTENT_ROW = f"ROW({', '.join(_CONTENT)}) AS content"
INSERT_SQL = f"""
    WITH r AS MATERIALIZED (
        SELECT *, {_KEY_ROW}, {_CONTENT_ROW}
        FROM (SELECT {_UNPACK},
                     md5(r::text) AS digest, ord
              FROM json_array_elements(CAST(%(rows)s AS json)) WITH ORDINALITY AS x(r, ord)
              ) AS unpacked
    ), near AS MATERIALIZED (
        SELECT {_KEY_ROW}, {_CONTENT_ROW}
        FROM (SELECT {", ".join("e." + c for c in _KEY + _CONTENT)}
              FROM (SELECT DISTINCT job_id, ts FROM r) AS k
              JOIN events e ON e.job_id = k.job_id AND e.ts = k.ts) AS stored_rows
    ), seen AS (
        SELECT b.*,
               bool_or(b.stored) OVER (PARTITION BY b.key) AS key_stored,
               bool_or(b.stored) OVER (PARTITION BY b.key, b.content) AS same_stored,
               min(b.ord) OVER (PARTITION BY b.key) AS key_first,
               min(b.ord) OVER (PARTITION BY b.key, b.content) AS content_first
        FROM (SELECT r.*, false AS stored FROM r
              UNION ALL
              SELECT {"NULL, " * (len(COLUMNS) + 2)}near.key, near.content, true FROM near
              ) AS b
    ), ins AS (
        INSERT INTO events ({", ".join(COLUMNS)})
        SELECT CASE WHEN (key_stored AND NOT same_stored)
                      OR (NOT key_stored AND content_first <> key_first)
               THEN CAST(digest AS uuid) ELSE event_id END,
               {", ".join(COLUMNS[1:])}
        FROM seen
        WHERE NOT stored
        ORDER BY 1
        ON CONFLICT (job_id, event_id, ts) DO NOTHING
        RETURNING job_id, ts
    ), dirty AS (
        INSERT INTO dirty_jobs (job_id, first_ts)
        SELECT job_id, min(ts) FROM ins GROUP BY job_id ORDER BY 1
    )
    SELECT count(*) FROM ins
"""

_RETRY_AS_INSERT = (pg_errors.UniqueViolation, pg_errors.DeadlockDetected)
_COPY_IN = pq.ExecStatus.COPY_IN
_FATAL = pq.ExecStatus.FATAL_ERROR
_COPY_CHUNK = 128 * 1024

# Each job's claim is its first stored event's model and team (docs/model.md, "Ownership").
# The batch claims its jobs first: a new job takes the batch's model and team, a stored one
# keeps its own (a team it lacked is filled in by an event of its model). The upsert row-locks
# each job's claim until commit, so two first batches for one job cannot both win, and it
# returns every job's claim, inserted or not, in the one statement.
CLAIM_SQL = """
    INSERT INTO job_owners AS o (job_id, model, team)
    SELECT j, m, t FROM unnest(CAST(%(jobs)s AS text[]), CAST(%(models)s AS text[]),
                               CAST(%(teams)s AS text[])) AS u(j, m, t)
    ORDER BY j
    ON CONFLICT (job_id) DO UPDATE SET team = CASE WHEN o.model = EXCLUDED.model
        THEN coalesce(o.team, EXCLUDED.team) ELSE o.team END
    RETURNING job_id, model, team
"""
# job_id -> (model, team) of its stored claim.
Claims = dict[str, tuple[str, str | None]]
# Given the stored claims of the batch's jobs: the rows that may be stored, and the rows
# moved to another job (their claims are made next, in the same transaction); ingest's
# job-claims check.
Admit = Callable[[Claims], tuple[EventRows, EventRows]]
# A row's job is claimed at most twice: its own id, then (another team's) the id in that
# team's namespace, which only that team's rows reach.
_CLAIM_ROUNDS = 2


def claims(rows: EventRows, default_team: str | None = None) -> dict[str, list[str | None]]:
    """The batch's claim per job: the first row's model, and the first team that rows of
    that model name (`default_team`, the writer's, for a row naming none)."""
    out: dict[str, list[str | None]] = {}
    for i, (job, model, team) in enumerate(zip(rows.job_id, rows.model, rows.team,
                                               strict=True)):
        if rows.is_scheduler(i):
            continue  # a scheduler's mapping never fixes a job's model or team
        team = team or default_team
        claim = out.get(job)
        if claim is None:
            out[job] = [model, team]
        elif claim[1] is None and team is not None and claim[0] == model:
            claim[1] = team
    return out


def _claim_params(rows: EventRows, default_team: str | None) -> dict[str, list[str | None]]:
    wanted = claims(rows, default_team)
    jobs = sorted(wanted)
    return {"jobs": jobs, "models": [wanted[j][0] for j in jobs],
            "teams": [wanted[j][1] for j in jobs]}


def rows_json(rows: EventRows) -> str:
    """The rows as the INSERT statement's JSON array of row arrays of text (the fallback
    path); PostgreSQL casts the numbers from text. A row's text is also what the id of a
    same-id event with other content is derived from, so it stays text field by field."""
    return orjson.dumps(list(zip(*map(as_text, rows.columns()), strict=True))).decode()


def _jobs_literal(jobs: Iterable[str]) -> str:
    return "{" + ",".join(f'"{job}"' for job in sorted(jobs)) + "}"


def _firsts_literal(jobs: list[str], firsts: Mapping[str, str] | None) -> str:
    if firsts is None:
        return "{" + ",".join("NULL" for _ in jobs) + "}"
    return "{" + ",".join(f'"{firsts[job]}Z"' for job in jobs) + "}"


def _queue_params(jobs: Iterable[str], firsts: Mapping[str, str] | None = None
                  ) -> dict[str, str]:
    ordered = sorted(jobs)
    return {"jobs": _jobs_literal(ordered), "firsts": _firsts_literal(ordered, firsts)}


def copy_script(jobs: Iterable[str], firsts: Mapping[str, str] | None = None) -> bytes:
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
    return (f"BEGIN; INSERT INTO dirty_jobs (job_id, first_ts) SELECT * FROM unnest('{literal}'"
            f"::text[], '{_firsts_literal(jobs, firsts)}'::timestamptz[]) ORDER BY 1;"
            f" {COPY_SQL}; COMMIT").encode()
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


async def _drive(conn: psycopg.AsyncConnection, gen: PQGen[None]) -> None:
    """`conn.wait(gen)`, the socket watched once for the whole exchange: psycopg's wait adds
    and drops a reader and arms a timer at every wait, three times a batch, a third of a
    small group's CPU (docs/performance.md, issue 30). Cancelled midway, the connection is
    left mid-statement, and the pool drops it."""
    loop = asyncio.get_running_loop()
    fd = conn.pgconn.socket
    woken: asyncio.Future[None] | None = None

    def wake() -> None:
        if woken is not None and not woken.done():
            woken.set_result(None)

    loop.add_reader(fd, wake)
    try:
        wanted = next(gen)
        while True:
            if wanted == Wait.R:
                woken = loop.create_future()
                await woken
                wanted = gen.send(Ready.R)
                continue
            # Writing (a flush, COPY data): nearly always possible at once.
            readable, writable, _ = select.select(
                [fd] if wanted & Wait.R else [], [fd], [], 0)
            if readable or writable:
                wanted = gen.send((Ready.R if readable else Ready.NONE)
                                  | (Ready.W if writable else Ready.NONE))
                continue
            woken = loop.create_future()  # a full socket buffer: until either way is open
            loop.add_writer(fd, wake)
            try:
                await woken
            finally:
                loop.remove_writer(fd)
    except StopIteration:
        return
    finally:
        loop.remove_reader(fd)


def _in_own_transaction(conn: psycopg.Connection | psycopg.AsyncConnection) -> bool:
    return conn.autocommit and conn.info.transaction_status == pq.TransactionStatus.IDLE


# The steps of storing a batch: what `_plan` yields, and each driver runs.
@dataclass(frozen=True, slots=True)
class _Claim:  # -> Claims
    params: dict[str, list[str | None]]


@dataclass(frozen=True, slots=True)
class _CopyAlone:  # -> None: the COPY as the one query of its own transaction
    script: bytes
    payload: bytes


@dataclass(frozen=True, slots=True)
class _CopyNested:  # -> None: the COPY and the queue rows in a savepoint
    payload: bytes
    queue: dict[str, str]


@dataclass(frozen=True, slots=True)
class _Insert:  # -> the count of new events
    params: dict[str, str]


_Step = _Claim | _CopyAlone | _CopyNested | _Insert
_Plan = Generator[_Step, Any, int]


def _plan(rows: EventRows, admit: Admit | None, default_team: str | None, *, alone: bool,
          grouped: bool = False) -> _Plan:
    """Every step of storing `rows`; `alone`: the connection is in autocommit mode, outside
    any transaction (else the caller's driver runs this in a transaction). A COPY that
    meets a stored or concurrent id is thrown back here and the batch is inserted, unless
    the rows are a group's (`grouped`: always COPYed, and the error is the caller's)."""
    if admit is not None:
        kept: list[EventRows] = []
        pending = rows
        for _ in range(_CLAIM_ROUNDS):
            if not len(pending):
                break
            admitted, pending = admit((yield _Claim(_claim_params(pending, default_team))))
            kept.append(admitted)
        rows = EventRows.concat(kept)
    if not len(rows):
        return 0
    if len(rows) >= COPY_MIN_ROWS or grouped:
        try:
            firsts = rows.first_seconds()
            if alone:
                yield _CopyAlone(copy_script(firsts, firsts), copy_payload(rows))
            else:
                yield _CopyNested(copy_payload(rows), _queue_params(firsts, firsts))
            return len(rows)
        except _RETRY_AS_INSERT:
            if grouped:
                raise
    return int((yield _Insert({"rows": rows_json(rows)})))


def store_rows(conn: psycopg.Connection, rows: EventRows, admit: Admit | None = None,
               default_team: str | None = None) -> int:
    """Store the events (distinct ids) not stored yet and queue their jobs; return how many
    were new. With `admit`, the batch first claims its jobs (a row naming no team claims
    for `default_team`) and stores only the rows `admit` keeps, in the same transaction.

    In a transaction the caller began, the COPY runs in a savepoint; in autocommit mode,
    as the one query of a transaction of its own.
    """
    if not len(rows):
        return 0
    if admit is None:
        return _run(conn, _plan(rows, None, None, alone=_in_own_transaction(conn)))
    with conn.transaction():  # the claims commit with the rows they admitted
        return _run(conn, _plan(rows, admit, default_team, alone=False))


def _run(conn: psycopg.Connection, plan: _Plan) -> int:
    answer: Any = None
    failed: BaseException | None = None
    while True:
        try:
            step = plan.send(answer) if failed is None else plan.throw(failed)
        except StopIteration as done:
            return int(done.value)
        answer, failed = None, None
        try:
            answer = _run_step(conn, step)
        except _RETRY_AS_INSERT as exc:
            failed = exc


def _run_step(conn: psycopg.Connection, step: _Step) -> Any:
    if isinstance(step, _Claim):
        return {r[0]: (r[1], r[2]) for r in conn.execute(CLAIM_SQL, step.params)}
    if isinstance(step, _Insert):
        row = conn.execute(INSERT_SQL, step.params).fetchone()
        assert row is not None
        return row[0]
    if isinstance(step, _CopyAlone):
        try:
            conn.wait(_script_gen(conn.pgconn, step.script, step.payload, conn.info.encoding))
        finally:
            if conn.info.transaction_status == pq.TransactionStatus.INERROR:
                conn.execute("ROLLBACK")
        return None
    if isinstance(step, _CopyNested):
        # A savepoint, so a retried id falls back to the insert without losing the claim.
        with conn.transaction(), conn.cursor() as cur:
            with cur.copy(COPY_SQL) as copy:
                copy.write(step.payload)
            cur.execute(QUEUE_SQL, step.queue)
    return None


async def store_rows_async(conn: psycopg.AsyncConnection, rows: EventRows,
                           admit: Admit | None = None, default_team: str | None = None
                           ) -> int:
    """`store_rows` on an asyncio connection (the ingest pool's, in autocommit mode)."""
    if not len(rows):
        return 0
    if admit is None:
        return await _run_async(conn, _plan(rows, None, None,
                                            alone=_in_own_transaction(conn)))
    async with conn.transaction():
        return await _run_async(conn, _plan(rows, admit, default_team, alone=False))


async def store_group_async(conn: psycopg.AsyncConnection, rows: EventRows) -> None:
    """Store `rows`, every one new, by one COPY in a transaction of its own, answered once
    committed; raise having stored nothing if any is stored already (or anything else
    fails): the caller then stores them another way (`store.ingest_pool.GroupCommit`)."""
    if not _in_own_transaction(conn):
        raise ValueError("a group is stored in a transaction of its own: autocommit, idle")
    await _run_async(conn, _plan(rows, None, None, alone=True, grouped=True))


async def _run_async(conn: psycopg.AsyncConnection, plan: _Plan) -> int:
    answer: Any = None
    failed: BaseException | None = None
    while True:
        try:
            step = plan.send(answer) if failed is None else plan.throw(failed)
        except StopIteration as done:
            return int(done.value)
        answer, failed = None, None
        try:
            answer = await _run_step_async(conn, step)
        except _RETRY_AS_INSERT as exc:
            failed = exc


async def _run_step_async(conn: psycopg.AsyncConnection, step: _Step) -> Any:
    if isinstance(step, _Claim):
        cur = await conn.execute(CLAIM_SQL, step.params, prepare=True)
        return {r[0]: (r[1], r[2]) for r in await cur.fetchall()}
    if isinstance(step, _Insert):
        cur = await conn.execute(INSERT_SQL, step.params, prepare=True)
        row = await cur.fetchone()
        assert row is not None
        return row[0]
    if isinstance(step, _CopyAlone):
        try:
            await _drive(conn, _script_gen(conn.pgconn, step.script, step.payload,
                                           conn.info.encoding))
        finally:
            if conn.info.transaction_status == pq.TransactionStatus.INERROR:
                await conn.execute("ROLLBACK")
        return None
    if isinstance(step, _CopyNested):
        async with conn.transaction(), conn.cursor() as cur:
            async with cur.copy(COPY_SQL) as copy:
                await copy.write(step.payload)
            await cur.execute(QUEUE_SQL, step.queue)
    return None
