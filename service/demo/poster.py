"""Posting the simulated fleet through the HTTP API: back-fill, then live."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import httpx
import orjson

from .fleet import FleetSpec, Regression, fleet_events, start_of_backfill

log = logging.getLogger("ett.demo")
BATCH = 1000


@dataclass(frozen=True)
class DemoOptions:
    days: float = 2.0
    live: bool = False
    seed: int = 7
    models: int = 24
    regressions: tuple[Regression, ...] = ()
    time_scale: float = 1.0
    failure_rate_per_hour: float | None = None
    progress: bool = False
    # Set while live: jobs started from then on run without `regressions`.
    lift_regressions: threading.Event | None = field(default=None, compare=False)


class Poster:
    """Posts batches, retrying what the contract says is retryable."""

    def __init__(self, base_url: str, token: str) -> None:
        self.client = httpx.Client(base_url=base_url, timeout=30,
                                   headers={"Authorization": f"Bearer {token}",
                                            "Content-Type": "application/json"})
        self.accepted = self.duplicates = self.rejected = 0

    def post(self, events: list[dict]) -> None:
        body = orjson.dumps({"events": events})
        for attempt in range(8):
            try:
                r = self.client.post("/v1/events", content=body)
            except httpx.TransportError as exc:
                log.warning("demo: post failed (%s), retrying", exc)
            else:
                if r.status_code == 202:
                    data = r.json()
                    self.accepted += data["accepted"]
                    self.duplicates += data["duplicates"]
                    self.rejected += len(data["rejected"])
                    for rej in data["rejected"][:3]:
                        log.warning("demo: event rejected: %s", rej)
                    return
                if r.status_code not in (429, 502, 503, 504):
                    raise RuntimeError(f"demo: POST /v1/events answered {r.status_code}: {r.text}")
            time.sleep(min(10.0, 0.2 * 2**attempt))
        raise RuntimeError("demo: the service kept refusing events")


def run_demo(base_url: str, token: str, opts: DemoOptions,
             stop: threading.Event | None = None,
             backfilled: threading.Event | None = None,
             after_backfill: Callable[[Poster, datetime], None] | None = None) -> Poster:
    """Post the back-fill, then `after_backfill` (what `ett serve --demo` adds), then (with
    `live`) keep posting; `backfilled` is set before the live part."""
    stop = stop or threading.Event()
    spec = FleetSpec(models=opts.models, seed=opts.seed, regressions=opts.regressions,
                     time_scale=opts.time_scale)
    if opts.failure_rate_per_hour is not None:
        spec = replace(spec, failure_rate_per_hour=opts.failure_rate_per_hour)
    now = datetime.now(UTC)
    # Anchor a back-fill on a whole hour so reruns with one seed post the same ids; a
    # live-only run starts now.
    start = now
    if opts.days > 0:
        start = start_of_backfill(now, opts.days).replace(minute=0, second=0, microsecond=0)
    lift = opts.lift_regressions
    stream = fleet_events(spec, start, lifted=lift.is_set if lift is not None else lambda: False)
    poster = Poster(base_url, token)
    bar = None
    if opts.progress:
        from tqdm import tqdm

        total_s = (now - start).total_seconds()
        bar = tqdm(total=round(total_s), unit="sim-s", desc="back-fill")
    batch: list[dict] = []
    pending: tuple[float, dict] | None = None
    for t, ev in stream:
        if t > now.timestamp():
            pending = (t, ev)
            break
        batch.append(ev)
        if len(batch) >= BATCH:
            poster.post(batch)
            batch = []
            if bar is not None:
                bar.n = round(t - start.timestamp())
                bar.refresh()
        if stop.is_set():
            return poster
    if batch:
        poster.post(batch)
    if bar is not None:
        bar.n = bar.total
        bar.close()
    log.info("demo: back-filled %d events (%d duplicates)", poster.accepted, poster.duplicates)
    if after_backfill is not None:
        after_backfill(poster, now)
    if backfilled is not None:
        backfilled.set()
    if not opts.live:
        return poster
    while not stop.is_set() and pending is not None:
        now_ts = time.time()
        batch = []
        while pending is not None and pending[0] <= now_ts:
            batch.append(pending[1])
            pending = next(stream, None)
        if batch:
            poster.post(batch)
        stop.wait(1.0)
    return poster


def run_demo_in_background(base_url: str, token: str, opts: DemoOptions,
                           stop: threading.Event,
                           after_backfill: Callable[[Poster, datetime], None] | None = None,
                           ) -> threading.Thread:
    def target() -> None:
        # Wait for the API to be up: the demo starts beside the server.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not stop.is_set():
            try:
                if httpx.get(base_url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        try:
            run_demo(base_url, token, opts, stop, after_backfill=after_backfill)
        except Exception:
            log.exception("demo fleet stopped")

    thread = threading.Thread(target=target, name="ett-demo", daemon=True)
    thread.start()
    return thread


def post_runs(poster: Poster, runs: Iterable[list[dict]], now: datetime) -> None:
    """Post whole runs in batches, leaving out what lies after `now` (a run still going)."""
    cut = now.isoformat().replace("+00:00", "Z")
    batch: list[dict] = []
    for run in runs:
        # Same-format UTC timestamps: text order is time order.
        batch.extend(ev for ev in run if ev["ts"] <= cut)
        while len(batch) >= BATCH:
            poster.post(batch[:BATCH])
            batch = batch[BATCH:]
    if batch:
        poster.post(batch)
