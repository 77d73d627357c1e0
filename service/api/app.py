"""The FastAPI application: the routes mounted over a context built by `build_context`."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi_offline import FastAPIOffline
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service import __version__, ingest
from service.access.auth import PreAuthMiddleware
from service.access.callers import caller
from service.console import routes as console
from service.errors import EttError
from service.wire.schema import openapi_components

from . import admin_routes, advice_routes, health, impact_routes, read_routes
from .context import AppContext, Context
from .redoc import add_redoc
from .request_metrics import MetricsMiddleware

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
    return app


async def ett_error(_request: Request, exc: EttError) -> JSONResponse:
    return JSONResponse({"detail": exc.message}, status_code=exc.status_code,
                        headers=exc.headers)


async def metrics_endpoint(request: Request, ctx: Context) -> Response:
    if ctx.settings.metrics_auth:
        await caller(request)
    return Response(generate_latest(ctx.registry), media_type=CONTENT_TYPE_LATEST)


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
