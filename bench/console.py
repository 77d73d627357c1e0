"""Target: every console page under 300 ms on the demo fleet (what `ett serve --demo`
back-fills: 24 models, 2 days), each timed as the median of several GETs of a real
`ett serve`, signed in with the session cookie like a browser.

The whole page is timed (sign-in check, reads, template), as the browser waits for it;
static files are not (the browser caches them).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import text

from service.demo.fleet import FleetSpec, fleet_events

from .common import ADMIN_TOKEN, Postgres, ett_serve, fmt, record, spread

NAME = "console"
TARGET_MS = 300.0


def _demo_events(models: int, hours: float, now: datetime) -> list[dict[str, Any]]:
    start, cut = now - timedelta(hours=hours), (now - timedelta(minutes=1)).timestamp()
    out = []
    for t, ev in fleet_events(FleetSpec(models=models), start):
        if t >= cut:
            break
        out.append(ev)
    return out


def _time_page(client: httpx.Client, path: str, runs: int) -> tuple[list[float], int]:
    first = client.get(path)  # warm-up, and proof that the page renders
    if first.status_code != 200 or "/ui/login" in str(first.url):
        raise RuntimeError(f"{path}: {first.status_code} {first.text[:300]}")
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        r = client.get(path)
        out.append((time.perf_counter() - t0) * 1000)
        r.raise_for_status()
    return out, len(first.content)


def run(pg: Postgres, quick: bool) -> dict[str, Any]:
    models, hours, runs = (6, 12, 3) if quick else (24, 48, 9)
    url = pg.create_database("bench_console")
    now = datetime.now(UTC).replace(microsecond=0)
    events = _demo_events(models, hours, now)
    figures: dict[str, Any] = {"models": models, "hours": hours, "events": len(events)}
    targets = []
    with ett_serve(url, aggregator=False) as srv, httpx.Client(
            base_url=srv.url, timeout=120,
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) as api:
        for i in range(0, len(events), 5000):
            api.post("/v1/events", json={"events": events[i:i + 5000]}).raise_for_status()
        api.post("/v1/aggregate").raise_for_status()
        listing = api.get("/v1/models").json()["models"]
        model, team = listing[0]["model"], listing[0]["team"]
        job_id = _most_attempts(url)
        pages = {"fleet 7d": "/ui/", "fleet 30d": "/ui/?window=30d",
                 "team (models)": f"/ui/teams/{team}",
                 "team (owner, SLOs)": "/ui/teams/scheduler",
                 "model": f"/ui/models/{model}", "job": f"/ui/jobs/{job_id}",
                 "checkpoint advice 30d": "/ui/checkpoints",
                 "impact (two labels, 30d)": "/ui/impact",
                 "impact (two periods)": "/ui/impact?mode=periods"}
        with httpx.Client(base_url=srv.url, timeout=60) as browser:
            signed = browser.post("/ui/login", data={"token": ADMIN_TOKEN})
            if signed.status_code != 303 or "ett_session" not in browser.cookies:
                raise RuntimeError(f"sign-in failed: {signed.status_code} {signed.text[:300]}")
            for label, path in pages.items():
                ms, size = _time_page(browser, path, runs)
                s = spread(ms, 1)
                figures[label] = {**s, "bytes": size, "path": path}
                print(f"{label} ({path}, {size} bytes): {fmt(s, ' ms')}", flush=True)
                targets.append((f"console page {label} < {TARGET_MS:.0f} ms", fmt(s, " ms"),
                                s["median"] < TARGET_MS if not quick else None))
    pg.drop_database(url)
    print(f"demo fleet: {models} models, {hours} h, {len(events)} events", flush=True)
    return record(NAME, quick, figures, targets)



def _most_attempts(url: str) -> str:
    """The job with the most attempts: the timeline with the most lanes and marks."""
    from service.store.engine import make_engine

    engine = make_engine(url, pool_size=1)
    with engine.connect() as conn:
        job_id = conn.execute(text("SELECT job_id FROM attempts GROUP BY job_id"
                                   " ORDER BY count(*) DESC, job_id LIMIT 1")).scalar_one()
    engine.dispose()
    return job_id
