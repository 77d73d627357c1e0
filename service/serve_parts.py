"""Background work that runs beside the API in `ett serve` (aggregator loop, demo)."""

from __future__ import annotations

import logging
import threading

from .app import AppContext

log = logging.getLogger("ett.serve")


def start_background(ctx: AppContext, *, aggregator: bool, stop: threading.Event
                     ) -> list[threading.Thread]:
    threads: list[threading.Thread] = []
    if aggregator and ctx.aggregator is not None:
        loop = threading.Thread(
            target=ctx.aggregator.run_loop,
            args=(ctx.settings.aggregate_interval_s, stop),
            name="ett-aggregator",
            daemon=True,
        )
        loop.start()
        threads.append(loop)
    return threads


def start_demo(base_url: str, token: str | None, stop: threading.Event) -> threading.Thread | None:
    from .demo import DemoOptions, run_demo_in_background

    if token is None:
        log.warning("demo: no admin token, cannot post the demo fleet")
        return None
    return run_demo_in_background(base_url, token, DemoOptions(days=2, live=True), stop)
