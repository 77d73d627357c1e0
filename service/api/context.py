"""The composition root: everything a process builds once from its settings.

`build_context` is the one place the parts are made and joined: `ett serve`, the tests'
fixtures and any embedding call it, and `create_app` only mounts the routes over what it
built. A route reaches the context through the `Context` dependency (the app's state),
never through a closure.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated

from fastapi import Depends, Request
from prometheus_client import disable_created_metrics
from sqlalchemy import Engine

from ett_core import Taxonomy
from service.access.auth import Authenticator
from service.access.tokens import TokenStore
from service.aggregate import Aggregator, build_aggregator
from service.console.routes import Console
from service.console.session import Sessions
from service.ingest import Ingestion, IngestLimits, utc_now
from service.metrics.collector import AggregatorCollector, register_aggregator_metrics
from service.metrics.exposition import ExportRegistry
from service.settings import Settings
from service.store.ingest_pool import IngestPool, pool_for
from service.taxonomy import taxonomy_from
from service.wire.span_mapping import load_mapping

from .request_metrics import HttpMetrics, watch_event_loop


@dataclass
class AppContext:
    """Everything the routes need, built by `build_context`."""

    settings: Settings
    engine: Engine
    auth: Authenticator
    token_store: TokenStore
    taxonomy: Taxonomy
    registry: ExportRegistry
    http_metrics: HttpMetrics
    ingestion: Ingestion
    console: Console
    clock: Callable[[], datetime]
    # Ingest stores through this one, on the event loop (the app closes its connections
    # as it stops: they belong to its loop).
    ingest_pool: IngestPool
    aggregator: Aggregator | None = None
    # The aggregator's exporter, in the process that runs the aggregation loop.
    collector: AggregatorCollector | None = None

    def close(self) -> None:
        """Release what the context holds beyond the engine (which its opener disposes)."""
        if self.collector is not None:
            self.collector.close()
        asyncio.run(self.ingest_pool.close())


def build_context(
    settings: Settings,
    engine: Engine,
    *,
    admin_token: str | None = None,
    with_aggregator: bool = True,
    export_aggregates: bool = False,
    ingest_url: str | None = None,
    clock: Callable[[], datetime] = utc_now,
    token_clock: Callable[[], float] | None = None,
) -> AppContext:
    """Build the parts of one process over `engine`.

    `admin_token` is the bootstrap admin token (default: `ETT_ADMIN_TOKEN`); ingest stores
    through a pool of its own on the event loop, on `ingest_url` (default: `engine`'s
    database); `with_aggregator` adds the
    aggregator (and `POST /v1/aggregate`); `export_aggregates` registers its exporter on
    `/metrics`, refreshed by every pass (the process that runs the aggregation loop);
    `token_clock` is the token store's clock (a test's, so no test sleeps for a TTL).
    """
    # `_created` series double the exposition and no dashboard or rule reads them.
    disable_created_metrics()
    s = settings
    token_store = TokenStore(engine, cache_ttl_s=s.token_cache_ttl_s,
                             last_used_flush_s=s.token_last_used_flush_s,
                             clock=token_clock or time.monotonic)
    # Tokens from `ett tokens create`, beside the bootstrap admin token.
    auth = Authenticator(admin_token or s.admin_token_value(), token_store.lookup,
                         peek=token_store.peek)
    taxonomy = taxonomy_from(s)
    registry = ExportRegistry()
    http_metrics = HttpMetrics(registry)
    pool = pool_for(ingest_url or engine.url.render_as_string(hide_password=False), s)
    ingestion = Ingestion(
        pool, IngestLimits.from_settings(s), clock,
        on_outcome=lambda o: http_metrics.count_batch(o.accepted, o.duplicates,
                                                      len(o.rejected)),
        owner_of=taxonomy.team_of_model, span_mapping=load_mapping(s.otlp_mapping))
    watch_event_loop(registry, lambda: ingestion.loop_lag.lag_s, lambda: ingestion.fair.held,
                     lambda: pool.store_lag.behind_s)
    aggregator = build_aggregator(s, engine, taxonomy) if with_aggregator else None
    collector = None
    if export_aggregates and aggregator is not None:
        collector = register_aggregator_metrics(registry, aggregator, engine,
                                                s.metrics_max_models_per_team,
                                                s.metrics_max_teams)
    return AppContext(
        settings=s, engine=engine, auth=auth, token_store=token_store, taxonomy=taxonomy,
        registry=registry, http_metrics=http_metrics, ingestion=ingestion,
        console=Console(engine, clock, s.slo_file,
                        Sessions(auth, max_sessions=s.console_max_sessions,
                                 per_token=s.console_sessions_per_token)),
        clock=clock, aggregator=aggregator, collector=collector, ingest_pool=pool)


async def context(request: Request) -> AppContext:
    """The app's context (`app.state.ctx`, set by `create_app`)."""
    return request.app.state.ctx


Context = Annotated[AppContext, Depends(context)]
