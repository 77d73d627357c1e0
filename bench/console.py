"""Target: every console page under 300 ms on the demo fleet (what `ett serve --demo`
back-fills: 24 models, 2 days), each timed as the median of several GETs of a real
`ett serve`, signed in with the session cookie like a browser.

The whole page is timed (sign-in check, reads, template), as the browser waits for it;
static files are not (the browser caches them).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from service.demo.fleet import FleetSpec, fleet_events

from .common import (
    ADMIN_TOKEN,
    Postgres,
    console_pages,
    ett_serve,
    fmt,
    most_attempts,
    record,
    signed_in_browser,
    spread,
    time_page,
)

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
        pages = console_pages(model, team, most_attempts(url))
        with signed_in_browser(srv.url, 60) as browser:
            for label, path in pages.items():
                ms, size = time_page(browser, path, runs)
                s = spread(ms, 1)
                figures[label] = {**s, "bytes": size, "path": path}
                print(f"{label} ({path}, {size} bytes): {fmt(s, ' ms')}", flush=True)
                targets.append((f"console page {label} < {TARGET_MS:.0f} ms", fmt(s, " ms"),
                                s["median"] < TARGET_MS if not quick else None))
    pg.drop_database(url)
    print(f"demo fleet: {models} models, {hours} h, {len(events)} events", flush=True)
    return record(NAME, quick, figures, targets)

