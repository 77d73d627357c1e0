"""The events table's time partitions, and retention (`ett prune`).

`events` is partitioned by range on `ts`: one partition per UTC calendar month
(`events_pYYYYMM`, [first instant of the month, first instant of the next)), plus
`events_default` for any instant no month partition covers (a backfill older than the
first partition, an event that arrives before its month's partition exists), so no valid
event is ever refused for want of a partition. Months rather than weeks: reads are by job,
never by time range, so every by-job read probes each partition's index once; about 14
monthly partitions cover the 400-day ingest horizon, 58 weekly ones would cost every
by-job read four times the probes. The partitions of this month and the next
`MONTHS_AHEAD` are created by `ett migrate` and by the aggregator (once a day), never by
hand.

Retention drops the raw events and per-job results of jobs that ended long ago. A month
whose partition lies wholly before the horizon is dropped whole (no row deleted, nothing
left for vacuum); the few events in it of jobs that are kept (still running, ended after
the horizon, or with no settled result: queued, quarantined, without an attempt) are
moved first to the default partition. Those jobs are found without reading the month,
from each job's bound of its earliest event (`job_first_ts`, kept by the aggregator) and
the queue (`_KEPT_JOBS`): work that grows with the jobs that started before the month's
end, not with its events. In the partition that
straddles the horizon and in the default partition, the events of the pruned jobs are
deleted row by row, as are their per-job results. The fleet rollups (`fleet_hourly`,
`settled_totals`) are kept, so windows, dashboards and counters over the pruned period
stay exactly as they were; only per-job detail (`GET /v1/jobs/{job_id}`, re-aggregation
after a taxonomy change) is given up.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import OperationalError

log = logging.getLogger(__name__)

BATCH_JOBS = 500
MONTHS_AHEAD = 2
PARTITION_PREFIX = "events_p"
DEFAULT_PARTITION = "events_default"
# Creating or detaching a partition waits for the table's lock; ingest queues behind a
# waiting DDL statement, so it gives up soon and the next attempt tries again.
_DDL_LOCK_TIMEOUT = "5s"
# One process changes the partitions at a time (aggregators, `ett migrate`, `ett prune`).
_PARTITION_LOCK_KEY = 0x45_54_54_50  # "ETTP"


def month_start(ts: datetime) -> datetime:
    ts = ts.astimezone(UTC)
    return datetime(ts.year, ts.month, 1, tzinfo=UTC)


def next_month(month: datetime) -> datetime:
    return datetime(month.year + month.month // 12, month.month % 12 + 1, 1, tzinfo=UTC)


def partition_name(month: datetime) -> str:
    return f"{PARTITION_PREFIX}{month.year:04d}{month.month:02d}"


def partition_month(name: str) -> datetime | None:
    """The month a partition named by `partition_name` holds (None for any other name)."""
    digits = name.removeprefix(PARTITION_PREFIX)
    if name == digits or len(digits) != 6 or not digits.isdigit():
        return None
    return datetime(int(digits[:4]), int(digits[4:]), 1, tzinfo=UTC)


def is_partitioned(conn: Connection) -> bool:
    return bool(conn.execute(text(
        "SELECT coalesce((SELECT relkind = 'p' FROM pg_class"
        " WHERE oid = to_regclass('events')), false)")).scalar_one())


def partitions(conn: Connection) -> list[str]:
    """The partitions attached to `events`, by name."""
    return sorted(conn.execute(text(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = to_regclass('events')")).scalars())


def _begin_ddl(conn: Connection) -> None:
    conn.execute(text(f"SET LOCAL lock_timeout = '{_DDL_LOCK_TIMEOUT}'"))
    conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PARTITION_LOCK_KEY})


def _bound(month: datetime) -> str:
    return f"'{month.isoformat()}'"


def ensure_partitions(engine: Engine, now: datetime, months_ahead: int = MONTHS_AHEAD
                      ) -> list[str]:
    """Create the month partitions of `now` and the `months_ahead` months after it that are
    missing; return their names. A no-op before the migration that partitions `events`.

    Each is created apart and attached (which locks `events` only against other schema
    changes, where `CREATE TABLE ... PARTITION OF` would block ingest until it committed);
    rows of its month that had landed in the default partition move into it first.
    """
    with engine.connect() as conn:
        if not is_partitioned(conn):
            return []
        have = set(partitions(conn))
    months = [month_start(now)]
    for _ in range(months_ahead):
        months.append(next_month(months[-1]))
    created = []
    for month in months:
        name = partition_name(month)
        if name in have:
            continue
        with engine.begin() as conn:
            _begin_ddl(conn)
            if name in partitions(conn):  # another process won the lock first
                continue
            lo, hi = _bound(month), _bound(next_month(month))
            conn.execute(text(f"CREATE TABLE {name} (LIKE events INCLUDING DEFAULTS)"))
            if DEFAULT_PARTITION in have:
                conn.execute(text(
                    f"WITH moved AS (DELETE FROM {DEFAULT_PARTITION} WHERE ts >= {lo}"
                    f" AND ts < {hi} RETURNING *) INSERT INTO {name} SELECT * FROM moved"))
            conn.execute(text(
                f"ALTER TABLE events ATTACH PARTITION {name} FOR VALUES FROM ({lo}) TO ({hi})"))
        created.append(name)
        log.info("events: created partition %s", name)
    return created


def ensure_partitions_quietly(engine: Engine, now: datetime) -> None:
    """`ensure_partitions` for a background caller: a lock not granted in time is logged
    and left for the next try (meanwhile new events land in the default partition)."""
    try:
        ensure_partitions(engine, now)
    except OperationalError as exc:
        log.warning("events: creating the partitions ahead failed, retried later: %s", exc)


# Only a job whose bound moves earlier (or that has none) is written: a running job's
# every pass would otherwise leave a dead row. A job given no instant (None: a queue row
# that did not know its batch's, for a job whose events were not all loaded) is bounded
# by its stored events; one with none is left out.
_NOTE_FIRST_TS = """
    INSERT INTO job_first_ts AS t (job_id, first_ts)
    SELECT j, f FROM (
        SELECT j, coalesce(f, (SELECT min(ts) FROM events e WHERE e.job_id = u.j)) AS f
        FROM unnest(CAST(:jobs AS text[]), CAST(:firsts AS timestamptz[])) AS u(j, f)) AS n
    WHERE f IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM job_first_ts o WHERE o.job_id = n.j AND o.first_ts <= n.f)
    ORDER BY j
    ON CONFLICT (job_id) DO UPDATE SET first_ts = EXCLUDED.first_ts
    WHERE EXCLUDED.first_ts < t.first_ts
"""


def note_first_ts(conn: Connection, firsts: Mapping[str, datetime | None]) -> None:
    """Lower each job's bound of its earliest event instant (`job_first_ts`) to the instant
    given (None: read from its events), in the transaction that consumes its queue rows:
    every stored event is then either behind a queue row still there or at or after its
    job's bound (what `_KEPT_JOBS` relies on)."""
    if firsts:
        jobs = sorted(firsts)
        conn.execute(text(_NOTE_FIRST_TS), {"jobs": jobs, "firsts": [firsts[j] for j in jobs]})


# What `prune_jobs` deletes: one predicate for both steps, so that a job whose month was
# dropped is also a job whose other events and results go.
_PRUNABLE = "NOT open AND last_at < :cutoff"

# The kept jobs that can have events before `hi` (the detached month's end), found without
# reading the month: every stored event is either behind a queue row still in `dirty_jobs`
# (whose `first_ts` is at or before it, or NULL: not known) or at or after its job's bound
# in `job_first_ts` (the aggregator lowers it in the transaction that consumes the queue
# row; migration 0014 filled it from the events stored before). So a job with an event
# in the month is one of these candidates, and those not pruned are kept: a job without a
# settled result to prune (never aggregated, quarantined, or with no attempt) included.
# A superset is harmless (its move finds no rows). The prunable ones are taken away as a
# set read from an index alone (ix_jobs_settled_last_at): probing each candidate's row
# (a page each since results are inline) took ~0.5 s for the 180-day fleet's first month.
_KEPT_JOBS = f"""
    SELECT job_id FROM job_first_ts WHERE first_ts < :hi
    UNION
    SELECT job_id FROM dirty_jobs WHERE first_ts IS NULL OR first_ts < :hi
    EXCEPT
    SELECT job_id FROM jobs WHERE {_PRUNABLE}
"""


def kept_jobs(conn: Connection, month: datetime, cutoff: datetime) -> list[str]:
    """The jobs kept by a prune to `cutoff` that can have events in `month` or before (a
    superset of those that do)."""
    return list(conn.execute(text(_KEPT_JOBS), {"hi": next_month(month), "cutoff": cutoff}
                             ).scalars())


def _drop_partition(conn: Connection, name: str, cutoff: datetime, steps: list[str]) -> int:
    """Drop one partition wholly before the horizon, moving the events of kept jobs to the
    default partition first; return how many events were dropped (from the statistics).
    What each step took is added to `steps`."""
    started = time.perf_counter()
    _begin_ddl(conn)
    # Counted from the statistics (a month past the horizon no longer changes, so the count
    # its last VACUUM or ANALYZE left stands): counting its rows would make retention
    # O(rows) again.
    total = conn.execute(text(
        "SELECT CASE WHEN reltuples >= 0 THEN reltuples::bigint END FROM pg_class"
        " WHERE oid = to_regclass(:p)"), {"p": name}).scalar_one()
    if total is None:  # never analyzed
        total = conn.execute(text(f"SELECT count(*) FROM {name}")).scalar_one()
    locking = time.perf_counter()
    conn.execute(text(f"ALTER TABLE events DETACH PARTITION {name}"))
    # Detached first, so that no event can arrive in it unseen; its range now routes to
    # the default partition.
    detached = time.perf_counter()
    month = partition_month(name)
    assert month is not None
    kept = kept_jobs(conn, month, cutoff)
    listed = time.perf_counter()
    moved = 0
    if kept:
        moved = conn.execute(text(f"INSERT INTO events SELECT * FROM {name}"
                                  " WHERE job_id = ANY(:ids)"), {"ids": kept}).rowcount
    rescued = time.perf_counter()
    conn.execute(text(f"DROP TABLE {name}"))
    steps.append(f"{total - moved} events, {moved} of {len(kept)} kept jobs moved; seconds:"
                 f" count {locking - started:.3f}, detach {detached - locking:.3f}, kept jobs"
                 f" {listed - detached:.3f}, move {rescued - listed:.3f},"
                 f" drop {time.perf_counter() - rescued:.3f}")
    return total - moved


def prune(engine: Engine, older_than: timedelta, now: datetime,
          batch_jobs: int = BATCH_JOBS) -> tuple[int, int]:
    """Delete jobs whose last attempt ended before now - older_than; return (jobs, events)."""
    cutoff = now - older_than
    dropped = drop_old_partitions(engine, cutoff)
    jobs, deleted = prune_jobs(engine, cutoff, batch_jobs)
    return jobs, dropped + deleted


def drop_old_partitions(engine: Engine, cutoff: datetime) -> int:
    """Drop the month partitions wholly before `cutoff` (keeping the events of jobs not
    pruned); return how many events went."""
    with engine.connect() as conn:
        old = [] if not is_partitioned(conn) else [
            name for name in partitions(conn)
            if (month := partition_month(name)) is not None and next_month(month) <= cutoff]
    dropped = 0
    for name in old:  # one transaction each: the lock on `events` is held briefly
        steps: list[str] = []
        with engine.begin() as conn:
            dropped += _drop_partition(conn, name, cutoff, steps)
            committing = time.perf_counter()
        log.info("events: dropped partition %s (%s, commit %.3f)", name, "".join(steps),
                 time.perf_counter() - committing)
    return dropped


def prune_jobs(engine: Engine, cutoff: datetime, batch_jobs: int = BATCH_JOBS
               ) -> tuple[int, int]:
    """Delete the jobs that ended before `cutoff`, their results and what is left of their
    events (in the partition straddling the horizon, in the default one), row by row;
    return (jobs, events)."""
    jobs_deleted = events_deleted = 0
    after = ""  # every job id sorts after the empty string
    while True:
        # One short transaction per batch: no long locks on a live database. Each batch
        # starts after the last one's ids: from the start of the key again, it would step
        # over every row deleted so far (dead until vacuumed), a quadratic walk (40 s for
        # 41,000 jobs of the 180-day fleet). A job locked by an aggregator is skipped
        # until the next prune.
        with engine.begin() as conn:
            ids = [r[0] for r in conn.execute(
                text(f"SELECT job_id FROM jobs WHERE {_PRUNABLE} AND job_id > :after"
                     " ORDER BY job_id LIMIT :n FOR UPDATE SKIP LOCKED"),
                {"cutoff": cutoff, "n": batch_jobs, "after": after},
            )]
            if not ids:
                return jobs_deleted, events_deleted
            after = ids[-1]
            params = {"ids": ids}
            events_deleted += conn.execute(
                text("DELETE FROM events WHERE job_id = ANY(:ids)"), params
            ).rowcount
            for table in ("segments", "rollup_hourly", "attempts", "dirty_jobs", "jobs",
                          "job_first_ts"):
                conn.execute(text(f"DELETE FROM {table} WHERE job_id = ANY(:ids)"), params)
            jobs_deleted += len(ids)
