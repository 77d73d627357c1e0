"""The fixture the /metrics tests share: the aggregator's collector on the app's registry."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from service.metrics.collector import AggregatorCollector, register_aggregator_metrics
from tests.factories import fixed


@pytest.fixture
def exporter(app_context, db_engine) -> Iterator[AggregatorCollector]:
    """The collector of the app's aggregator, its clock fixed at `tests.factories.NOW`."""
    app_context.aggregator.clock = fixed()
    collector = register_aggregator_metrics(app_context.registry, app_context.aggregator,
                                            db_engine)
    yield collector
    collector.close()
