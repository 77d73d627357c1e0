"""Building the long-lived parts from settings (shared by serve, aggregate and tests)."""

from __future__ import annotations

from sqlalchemy import Engine

from ett_core import Taxonomy

from .aggregate import Aggregator
from .settings import Settings
from .taxonomy import load_taxonomy


def taxonomy_from(settings: Settings) -> Taxonomy:
    return load_taxonomy(settings.taxonomy) if settings.taxonomy else Taxonomy.default()


def build_aggregator(settings: Settings, engine: Engine) -> Aggregator:
    return Aggregator(
        engine,
        taxonomy_from(settings),
        heartbeat_timeout_s=settings.heartbeat_timeout_s,
        batch_jobs=settings.aggregate_batch_jobs,
    )
