"""The text /metrics serves: a registry whose collectors may keep their families rendered.

The aggregator's collector changes only when a pass ends (metrics/collector.py), and for a
500-model fleet its families are ~1.3 MB of text that take ~100 ms to render: it renders
them once per change (`rendered()`), and every scrape until the next pass sends those bytes.
The other collectors (request metrics, pass durations) change with every request and are
rendered per scrape, as `generate_latest` would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric


class Families:
    """Metric families from a function, as something `generate_latest` renders."""

    def __init__(self, families: Callable[[], Iterable[Metric]]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families()


class ExportRegistry(CollectorRegistry):
    """A `CollectorRegistry` whose `exposition()` is `generate_latest(self)`, byte for byte,
    with each collector that has a `rendered()` method contributing its kept text."""

    def exposition(self) -> bytes:
        with self._lock:
            collectors = list(self._collector_to_names)
            target = self._target_info_metric() if self._target_info else None
        parts = [generate_latest(Families(lambda: [target]))] if target is not None else []
        for collector in collectors:
            rendered = getattr(collector, "rendered", None)
            parts.append(rendered() if rendered is not None
                         else generate_latest(Families(collector.collect)))
        return b"".join(parts)
