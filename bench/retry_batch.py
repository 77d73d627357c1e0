"""A client's retry of a whole batch, in-process: a batch stored once, then re-sent
unchanged (every event a duplicate, so the COPY meets the unique key and the batch falls
back to the statement that skips what is stored). Timed on one asyncio connection in
autocommit mode (the ingest pool's), under the ingest statement timeout (`Settings`).

Two shapes of the largest batch the ingest limits allow (`max_batch_events`): one job's
ranks at a few instants with small attrs (the shape whose per-row lookup was quadratic),
and the same with attrs filling the body limit (`max_body_bytes`). Wall time per retry,
the median of the rounds (a retry the timeout cancelled counted at the timeout), the load
beside it.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import psycopg
from psycopg import errors as pg_errors

from service.access.auth import Principal
from service.settings import Settings
from service.store.copy_text import EventRows
from service.store.events import store_rows_async
from service.wire.batch import validate_batch

from .common import Postgres, libpq_url, record

NAME = "ingest_retry_batch"
_RANKS = 1000


def _batch(n: int, attrs_bytes: int) -> EventRows:
    now = datetime.now(UTC).replace(microsecond=0)
    pad = "x" * attrs_bytes
    events: list[dict[str, Any]] = [
        {"event_id": str(uuid.uuid4()),
         "ts": (now - timedelta(seconds=n // _RANKS - i // _RANKS)).isoformat(),
         "job_id": "bench-retry", "attempt": 0, "model": "bench", "type": "heartbeat",
         "gpus": _RANKS, "rank": i % _RANKS, "attrs": {"step": i // _RANKS, "pad": pad}}
        for i in range(n)]
    admin = Principal(role="admin", token_id="bench")
    batch = validate_batch(events, admin, now=datetime.now(UTC), max_future_s=300.0,
                           max_age_s=400 * 86400.0)
    assert not batch.rejected, batch.rejected[:3]
    return batch.rows


async def _retries(url: str, rows: EventRows, rounds: int, timeout_ms: int) -> list[float | None]:
    """Seconds per retry; None for a retry the statement timeout cancelled."""
    out: list[float | None] = []
    async with await psycopg.AsyncConnection.connect(libpq_url(url), autocommit=True) as conn:
        await conn.execute(f"SET statement_timeout = {int(timeout_ms)}")
        assert await store_rows_async(conn, rows) == len(rows)
        for _ in range(rounds):
            began = time.perf_counter()
            try:
                new = await store_rows_async(conn, rows)
            except pg_errors.QueryCanceled:
                out.append(None)
                continue
            assert new == 0, f"a retry stored {new} events again"
            out.append(time.perf_counter() - began)
    return out


def run(pg: Postgres, quick: bool) -> dict[str, Any]:
    settings = Settings(database_url="postgresql://unused")
    n, timeout_ms = settings.max_batch_events, settings.ingest_statement_timeout_ms
    rounds = 3 if quick else 5
    # attrs filling the body: the limit over the events, less the rest of an event's JSON.
    fill = max(0, settings.max_body_bytes // n - 260)
    figures: dict[str, Any] = {"events": n, "statement_timeout_ms": timeout_ms,
                               "load_1m_before": os.getloadavg()[0]}
    targets = []
    for shape, attrs_bytes in (("small_attrs", 0), ("body_limit", fill)):
        rows = _batch(n, attrs_bytes)
        body = len(orjson.dumps({"events": [r._asdict() for r in rows.rows()]}))
        url = pg.create_database("bench_retry")
        times = asyncio.run(_retries(url, rows, rounds, timeout_ms))
        pg.drop_database(url)
        done = [t for t in times if t is not None]
        # A cancelled retry took the whole timeout: counted at it, the median is a floor.
        median = round(statistics.median(timeout_ms / 1e3 if t is None else t
                                         for t in times), 3)
        figures[shape] = {"body_bytes": body, "retry_s": [None if t is None else round(t, 3)
                                                           for t in times],
                          "median_s": median, "timed_out": len(times) - len(done)}
        print(f"retry of a {n}-event batch ({shape}, ~{body // 1024} KiB): median {median} s"
              f" over {len(times)} retries, {len(times) - len(done)} cancelled by the"
              f" {timeout_ms} ms statement timeout", flush=True)
        targets.append((f"a retried {n}-event batch ({shape}) is all duplicates under the"
                        f" {timeout_ms} ms statement timeout",
                        f"median {median} s, {len(times) - len(done)} timed out",
                        len(done) == len(times)))
    figures["load_1m_after"] = os.getloadavg()[0]
    return record(NAME, quick, figures, targets)
