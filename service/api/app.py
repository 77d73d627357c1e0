"""The FastAPI application, assembled from parts built once at start-up."""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi_offline import FastAPIOffline
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    disable_created_metrics,
    generate_latest,
)

from service import __version__, ingest
from service.access.auth import Authenticator, PreAuthMiddleware
from service.access.tokens import TokenStore
from service.aggregate import Aggregator
from service.console import routes as console
from service.console.session import Sessions
from service.errors import EttError
from service.settings import Settings
from service.store.ingest_pool import IngestPool, pool_for
from service.taxonomy import taxonomy_from
from service.wire.schema import openapi_components
from service.wire.span_mapping import load_mapping

from . import admin_routes, advice_routes, health, impact_routes, read_routes
from .redoc import add_redoc
from .request_metrics import HttpMetrics, MetricsMiddleware

log = logging.getLogger(__name__)

@dataclass
class AppContext:
    """Everything the routes need, built by the CLI (or a test) and passed down."""

    settings: Settings
    engine: Any  # sqlalchemy Engine
    auth: Authenticator
    clock: Callable[[], datetime] = ingest.utc_now
    aggregator: Aggregator | None = None
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    extra_routers: list[Any] = field(default_factory=list)
    token_store: TokenStore | None = None
    # POST /v1/events stores through this one, on the event loop (made for `engine`'s
    # database unless given; the app then closes it when it stops).
    ingest_pool: IngestPool | None = None


def create_app(ctx: AppContext) -> FastAPI:
    # `_created` series double the exposition and no dashboard or rule reads them.
    disable_created_metrics()
    # FastAPIOffline serves Swagger UI and ReDoc from its package, not from a CDN, so /docs
    # works on a machine without internet access.
    app: FastAPI = FastAPIOffline(
        title="ETT telemetry",
        version=__version__,
        description="Effective Training Time telemetry: ingest, results and metrics.",
        redoc_url=None,  # ours (api/redoc.py): the package's still fetches a logo from a CDN
        # FastAPI's own OpenTelemetry hooks looked up the global providers (through
        # os.environ) on every request; the service exports Prometheus metrics instead.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    add_redoc(app)
    s = ctx.settings
    if not ctx.auth.has_lookup:
        # Tokens from `ett tokens create`, beside the bootstrap admin token.
        ctx.token_store = TokenStore(ctx.engine, cache_ttl_s=s.token_cache_ttl_s,
                                     last_used_flush_s=s.token_last_used_flush_s)
        ctx.auth = ctx.auth.with_lookup(ctx.token_store.lookup, peek=ctx.token_store.peek)
    metrics = HttpMetrics(ctx.registry)
    app.state.ctx = ctx
    app.state.http_metrics = metrics
    # Added first, so it runs inside the metrics middleware (whose timing then includes it).
    app.add_middleware(PreAuthMiddleware, auth=ctx.auth)
    app.add_middleware(MetricsMiddleware, metrics=metrics)

    @app.exception_handler(EttError)
    async def _ett_error(_request: Request, exc: EttError) -> JSONResponse:
        return JSONResponse({"detail": exc.message}, status_code=exc.status_code,
                            headers=exc.headers)

    limits = ingest.IngestLimits(
        max_body_bytes=s.max_body_bytes,
        max_batch_events=s.max_batch_events,
        max_future_s=s.max_future_skew_s,
        max_age_s=s.max_event_age_days * 86400,
        ingest_max_age_s=s.ingest_max_age.total_seconds(),
        max_in_flight=s.ingest_max_in_flight,
        max_in_flight_bytes=s.ingest_max_in_flight_bytes,
        max_in_flight_per_token=s.ingest_max_in_flight_per_token,
        body_deadline_s=s.ingest_body_deadline_s,
        max_spans=s.otlp_max_spans,
        max_attributes=s.otlp_max_attributes,
        work_processes=s.work_processes,
        work_queue=s.work_queue,
    )
    taxonomy = ctx.aggregator.taxonomy if ctx.aggregator is not None else taxonomy_from(s)
    if ctx.ingest_pool is None:
        ctx.ingest_pool = pool_for(ctx.engine.url.render_as_string(hide_password=False), s)
        app.router.lifespan_context = _closing(app.router.lifespan_context, ctx.ingest_pool)
    ingest_routes = ingest.build_router(
        ctx.ingest_pool,
        ctx.auth,
        limits,
        ctx.clock,
        on_outcome=lambda o: metrics.count_batch(o.accepted, o.duplicates, len(o.rejected)),
        owner_of=taxonomy.team_of_model,
        span_mapping=load_mapping(s.otlp_mapping),
    )
    app.include_router(ingest_routes)
    app.include_router(health.build_router(ctx.engine))
    app.include_router(read_routes.build_router(ctx.engine, ctx.auth, ctx.clock))
    app.include_router(advice_routes.build_router(ctx.engine, ctx.auth, ctx.clock))
    app.include_router(impact_routes.build_router(
        ctx.engine, ctx.auth, ctx.clock, max_body_bytes=s.annotation_max_body_bytes,
        max_per_team=s.annotations_max_per_team, body_deadline_s=s.ingest_body_deadline_s))
    if ctx.aggregator is not None:
        app.include_router(admin_routes.build_router(ctx.aggregator, ctx.auth))
    for router in ctx.extra_routers:
        app.include_router(router)
    # The web console under /ui/ (and / redirects there); it reads what /v1/ reads.
    app.state.console_sessions = console.install(
        app, ctx.engine, ctx.auth, ctx.clock, s.slo_file,
        Sessions(ctx.auth, max_sessions=s.console_max_sessions,
                 per_token=s.console_sessions_per_token))

    @app.get("/metrics", summary="Prometheus exposition", include_in_schema=True)
    async def metrics_endpoint(request: Request) -> Response:
        if s.metrics_auth:
            ctx.auth.authenticate(request.headers.get("authorization"))
        return Response(generate_latest(ctx.registry), media_type=CONTENT_TYPE_LATEST)

    original_openapi = app.openapi

    def _openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = original_openapi()
            schema.setdefault("components", {}).setdefault("schemas", {}).update(
                openapi_components()
            )
            schema["components"]["securitySchemes"] = {
                "bearer": {"type": "http", "scheme": "bearer"}
            }
            schema["security"] = [{"bearer": []}]
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = _openapi  # type: ignore[method-assign]
    _with_fast_routes(app, ingest_routes.routes, metrics, ctx.auth)
    return app


def _with_fast_routes(app: FastAPI, routes: list[Any], metrics: HttpMetrics,
                      auth: Authenticator) -> None:
    """Put a short way in for the routes a fleet calls most before the app's stack.

    FastAPI's stack (its middlewares, the router, dependency solving) cost a 1-event
    `POST /v1/events` about a third of its CPU (docs/performance.md). A route found here
    is called straight from the outermost layer, inside the same request metrics and token
    resolution as every route, its errors answered as the app's handler answers them."""
    build = app.build_middleware_stack

    def build_with_fast_routes() -> Any:
        stack = build()
        fast = _fast_routes(app, routes, metrics, auth)
        if not fast:
            return stack

        async def dispatch(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                route = fast.get((scope["method"], scope["path"]))
                if route is not None:
                    await route(scope, receive, send)
                    return
            await stack(scope, receive, send)

        return dispatch

    app.build_middleware_stack = build_with_fast_routes  # type: ignore[method-assign]


def _fast_routes(app: FastAPI, routes: list[Any], metrics: HttpMetrics, auth: Authenticator
                 ) -> dict[tuple[str, str], Callable[[Any, Any, Any], Any]]:
    """POST /v1/events (of `routes`, included without a prefix), when its endpoint takes
    the request alone (nothing for FastAPI to solve) and no root path is to be honoured."""
    out: dict[tuple[str, str], Callable[[Any, Any, Any], Any]] = {}
    if app.root_path:
        return out
    for route in routes:
        if (isinstance(route, APIRoute) and route.path == "/v1/events"
                and route.methods == {"POST"}
                and list(inspect.signature(route.endpoint).parameters) == ["request"]):
            out[("POST", route.path)] = _fast_route(route, metrics, auth)
    return out


def _fast_route(route: APIRoute, metrics: HttpMetrics, auth: Authenticator
                ) -> Callable[[Any, Any, Any], Any]:
    endpoint = route.endpoint

    async def answer(scope: Any, receive: Any, send: Any) -> None:
        request = Request(scope, receive, send)
        try:
            response = await endpoint(request)
        except EttError as exc:
            response = JSONResponse({"detail": exc.message}, status_code=exc.status_code,
                                    headers=exc.headers)
        await response(scope, receive, send)

    inner = MetricsMiddleware(PreAuthMiddleware(answer, auth=auth), metrics=metrics)

    async def fast(scope: Any, receive: Any, send: Any) -> None:
        scope["route"] = route  # the metrics' label, as the router would record it
        await inner(scope, receive, send)

    return fast


def _closing(lifespan: Callable[[Any], Any], pool: IngestPool) -> Callable[[Any], Any]:
    """`lifespan`, then the ingest pool closed as the app stops."""

    @asynccontextmanager
    async def closing(app: Any) -> AsyncIterator[Any]:
        try:
            async with lifespan(app) as state:
                yield state
        finally:
            await pool.close()

    return closing
