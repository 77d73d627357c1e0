"""The FastAPI application: the routes mounted over a context built by `build_context`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi_offline import FastAPIOffline
from prometheus_client import CONTENT_TYPE_LATEST

from service import __version__, ingest
from service.access.auth import PreAuthMiddleware
from service.access.callers import caller
from service.console import routes as console
from service.errors import EttError
from service.store.ingest_pool import IngestPool
from service.wire.schema import openapi_components

from . import admin_routes, advice_routes, events_route, health, impact_routes, read_routes
from .context import AppContext, Context
from .events_route import ASGIApp, EventsRoute, error_response, front_door
from .redoc import add_redoc
from .request_metrics import MetricsMiddleware

# Every router but the admin one, which needs an aggregator.
ROUTERS = (ingest.router, health.router, read_routes.router, advice_routes.router,
           impact_routes.router)


def create_app(ctx: AppContext, *, fast: bool = True) -> FastAPI:
    """The app over `ctx`; `fast=False` serves `POST /v1/events` through FastAPI's stack
    too, as it is served under a root path (the tests hold the two ways' answers equal)."""
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
    # What the dependencies reach: the context (service.api.context), the authenticator
    # (service.access.callers), the ingest flow (service.ingest), the console's state.
    app.state.ctx = ctx
    app.state.auth = ctx.auth
    app.state.ingestion = ctx.ingestion
    app.state.console = ctx.console
    app.state.console_sessions = ctx.console.sessions
    # Added first, so it runs inside the metrics middleware (whose timing then includes it).
    app.add_middleware(PreAuthMiddleware, auth=ctx.auth)
    app.add_middleware(MetricsMiddleware, metrics=ctx.http_metrics)
    app.add_exception_handler(EttError, ett_error)  # type: ignore[arg-type]
    for router in ROUTERS:
        app.include_router(router)
    if ctx.aggregator is not None:
        app.include_router(admin_routes.router)
    # The web console under /ui/ (and / redirects there); it reads what /v1/ reads.
    console.install(app)
    app.add_api_route("/metrics", metrics_endpoint, methods=["GET"],
                      summary="Prometheus exposition")
    app.openapi = lambda: openapi_schema(app)  # type: ignore[method-assign]
    # The pool's connections belong to the app's loop: closed as the app stops.
    app.router.lifespan_context = _closing(app.router.lifespan_context, ctx.ingest_pool)
    if fast:
        app.state.fast_routes = fast_routes(app, ctx)
        _with_fast_routes(app, app.state.fast_routes)
    else:
        app.state.fast_routes = {}
    return app


async def ett_error(_request: Request, exc: EttError) -> JSONResponse:
    return error_response(exc)


async def metrics_endpoint(request: Request, ctx: Context) -> Response:
    if ctx.settings.metrics_auth:
        await caller(request)
    return Response(ctx.registry.exposition(), media_type=CONTENT_TYPE_LATEST)


def openapi_schema(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document plus the batch's JSON Schema and the bearer scheme, built once."""
    if app.openapi_schema is None:
        schema = FastAPI.openapi(app)
        schema.setdefault("components", {}).setdefault("schemas", {}).update(
            openapi_components()
        )
        schema["components"]["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer"}
        }
        schema["security"] = [{"bearer": []}]
        app.openapi_schema = schema
    return app.openapi_schema
def _with_fast_routes(app: FastAPI, routes: dict[tuple[str, str], ASGIApp]) -> None:
    """Answer `routes` first inside the app too (for whatever calls the app itself: a test
    client, an embedding); `ett serve` answers them before the server's own layers
    (`events_route.front_door`)."""
    build = app.build_middleware_stack

    def build_with_fast_routes() -> Any:
        return front_door(build(), routes)

    app.build_middleware_stack = build_with_fast_routes  # type: ignore[method-assign]


def fast_routes(app: FastAPI, ctx: AppContext) -> dict[tuple[str, str], ASGIApp]:
    """The routes served ahead of FastAPI: POST /v1/events while the ingest router (included
    without a prefix) has it as `service.ingest.post_events`, which `EventsRoute` stands
    for, and no root path is to be honoured."""
    if app.root_path:
        return {}
    for route in ingest.router.routes:
        if (isinstance(route, APIRoute) and route.path == events_route.PATH
                and route.methods == {"POST"} and route.endpoint is ingest.post_events):
            return {("POST", route.path): EventsRoute(ctx.ingestion, ctx.auth,
                                                      ctx.http_metrics)}
    return {}


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
