"""/redoc with nothing fetched from outside the service.

fastapi-offline serves ReDoc's script from its package, but that script draws its "API
docs by Redocly" logo from cdn.redoc.ly. This page serves the same script with that one
address replaced by an inline image, so the page is whole on a machine without internet.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import fastapi_offline
from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html
from starlette.responses import HTMLResponse, Response

CDN_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"
# An empty SVG: the attribution link keeps its text, the image costs no request.
INLINE_LOGO = "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg'/%3E"
SCRIPT_PATH = "/redoc-assets/redoc.standalone.js"


@cache
def redoc_script() -> bytes:
    path = Path(fastapi_offline.__file__).parent / "static" / "redoc.standalone.js"
    return path.read_text(encoding="utf-8").replace(CDN_LOGO, INLINE_LOGO).encode()


def add_redoc(app: FastAPI, path: str = "/redoc") -> None:
    @app.get(SCRIPT_PATH, include_in_schema=False)
    async def _script() -> Response:
        return Response(redoc_script(), media_type="application/javascript",
                        headers={"Cache-Control": "public, max-age=86400"})

    @app.get(path, include_in_schema=False)
    async def _page(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(openapi_url=f"{root}{app.openapi_url}",
                              title=f"{app.title} - ReDoc",
                              redoc_js_url=f"{root}{SCRIPT_PATH}", with_google_fonts=False,
                              redoc_favicon_url=f"{root}/static-offline-docs/favicon.png")
