"""The FastAPI application: the routes mounted over a context built by `build_context`."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi_offline import FastAPIOffline
from prometheus_client import CONTENT_TYPE_LATEST

from service import __version__, ingest
from service.access.auth import Authenticator, PreAuthMiddleware
from service.access.callers import caller
from service.console import routes as console
from service.errors import EttError
from service.store.ingest_pool import IngestPool
from service.wire.schema import openapi_components

from . import admin_routes, advice_routes, health, impact_routes, read_routes
from .context import AppContext, Context
from .redoc import add_redoc
from .request_metrics import HttpMetrics, MetricsMiddleware

# Every router but the admin one, which needs an aggregator.
ROUTERS = (ingest.router, health.router, read_routes.router, advice_routes.router,
           impact_routes.router)


def create_app(ctx: AppContext) -> FastAPI:
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
    _with_fast_routes(app, ingest.router.routes, ctx.http_metrics, ctx.auth)
    return app


async def ett_error(_request: Request, exc: EttError) -> JSONResponse:
    return JSONResponse({"detail": exc.message}, status_code=exc.status_code,
                        headers=exc.headers)


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
