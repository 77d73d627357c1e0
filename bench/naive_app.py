"""The naive baseline of `bench/small_writers.py`: a minimal FastAPI app that validates
nothing and inserts each request's events in one autocommit statement (a transaction of
its own), on asyncio connections, served by uvicorn as `ett serve` is.

    python -m bench.naive_app --port P --dsn DSN [--connections 16]
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import psycopg
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response

INSERT = """
    INSERT INTO events (event_id, ts, job_id, attempt, model, type, phase, gpus, team, rank,
                        attrs)
    SELECT * FROM jsonb_to_recordset(CAST(%(events)s AS jsonb)) AS r(
        event_id uuid, ts timestamptz, job_id text, attempt int, model text, type text,
        phase text, gpus int, team text, rank int, attrs jsonb)
    ON CONFLICT DO NOTHING
"""


def build_app(dsn: str, connections: int) -> FastAPI:
    idle: asyncio.Queue[psycopg.AsyncConnection] = asyncio.Queue()

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        for _ in range(connections):
            idle.put_nowait(await psycopg.AsyncConnection.connect(dsn, autocommit=True))
        yield
        while not idle.empty():
            await idle.get_nowait().close()

    app = FastAPI(lifespan=lifespan, telemetry={"tracing": False, "metrics": False,
                                                "logs": False})

    @app.post("/v1/events", status_code=202)
    async def post_events(request: Request) -> Response:
        events: list[dict[str, Any]] = orjson.loads(await request.body())["events"]
        conn = await idle.get()
        try:
            cur = await conn.execute(INSERT, {"events": orjson.dumps(events).decode()},
                                     prepare=True)
            accepted = cur.rowcount
        finally:
            idle.put_nowait(conn)
        return Response(orjson.dumps({"accepted": accepted}), status_code=202,
                        media_type="application/json")

    @app.get("/readyz")
    async def ready() -> dict[str, str]:
        return {"status": "ok"}

    return app


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--dsn", required=True)
    p.add_argument("--connections", type=int, default=16)
    args = p.parse_args()
    uvicorn.run(build_app(args.dsn, args.connections), host="127.0.0.1", port=args.port,
                log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
