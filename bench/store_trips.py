"""The API's CPU per stored batch, in-process: one batch as one query (`BEGIN; queue rows;
COPY; COMMIT`, what `store.events.store_rows_async` sends) against the five round trips
the ingest pool took before (BEGIN, COPY start, COPY end, the queue statement, COMMIT).

One asyncio connection in autocommit mode, batches of 100 validated events (the per-event
work is the same in both; the difference is per batch), the two ways alternated in rounds
so that the machine's load falls on both alike; CPU of this process (process_time), the
least of the rounds.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

import psycopg

from service.access.auth import Principal
from service.store.copy_text import EventRows, copy_payload
from service.store.events import COPY_SQL, QUEUE_SQL, _queue_params, store_rows_async
from service.wire.batch import validate_batch

from .common import Postgres, libpq_url, record
from .loadgen import Ids, template_events

NAME = "ingest_store_trips"
SIZE = 100


async def _five_trips(conn: psycopg.AsyncConnection, rows: EventRows) -> None:
    async with conn.transaction(), conn.cursor() as cur:
        async with cur.copy(COPY_SQL) as copy:
            await copy.write(copy_payload(rows))
        await cur.execute(QUEUE_SQL, _queue_params(rows.jobs()))


async def _one_query(conn: psycopg.AsyncConnection, rows: EventRows) -> None:
    await store_rows_async(conn, rows)


def _batches(n: int, template: list[dict[str, Any]], ids: Ids) -> list[EventRows]:
    admin = Principal(role="admin", token_id="bench")
    now = datetime.now(UTC)
    out = []
    for b in range(n):
        events = [dict(template[(b * SIZE + i) % len(template)], event_id=ids())
                  for i in range(SIZE)]
        batch = validate_batch(events, admin, now=now, max_future_s=300.0,
                               max_age_s=400 * 86400.0)
        out.append(batch.rows)
    return out


async def _measure(url: str, per_round: int, rounds: int) -> dict[str, float]:
    ways = {"five_round_trips": _five_trips, "one_query": _one_query}
    best = dict.fromkeys(ways, float("inf"))
    template, ids = template_events(2000), Ids(7)  # fresh ids throughout: no fallback
    async with await psycopg.AsyncConnection.connect(libpq_url(url), autocommit=True) as conn:
        for _ in range(rounds):
            for name, store in ways.items():
                batches = _batches(per_round, template, ids)
                began = time.process_time()
                for rows in batches:
                    await store(conn, rows)
                best[name] = min(best[name], time.process_time() - began)
    return {name: round(cpu / per_round * 1e3, 3) for name, cpu in best.items()}


def run(pg: Postgres, quick: bool) -> dict[str, Any]:
    url = pg.create_database("bench_trips")
    ms = asyncio.run(_measure(url, 50 if quick else 400, 3 if quick else 5))
    pg.drop_database(url)
    saved = round(ms["five_round_trips"] - ms["one_query"], 3)
    print(f"store of a {SIZE}-event batch, CPU ms per batch in the API process:"
          f" five round trips {ms['five_round_trips']}, one query {ms['one_query']}")
    return record(NAME, quick, {"cpu_ms_per_batch": ms, "saved_ms_per_batch": saved,
                                "batch_size": SIZE}, [
        ("API CPU per stored batch: five round trips vs one query (in-process)",
         f"{ms['five_round_trips']} ms vs {ms['one_query']} ms ({saved} ms saved per batch)",
         None),
    ])
