"""Background work that runs beside the API in `ett serve` (aggregator loop, demo)."""

from __future__ import annotations

import threading

from .app import AppContext


def start_background(ctx: AppContext, *, aggregator: bool, stop: threading.Event
                     ) -> list[threading.Thread]:
    return []


def start_demo(base_url: str, token: str | None, stop: threading.Event) -> None:
    return None
