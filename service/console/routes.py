"""The console's HTTP side: sign-in and sign-out, the job search, static files, and one
GET route per registered page (service.console.pages.PAGES)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape
from sqlalchemy import Engine
from starlette.concurrency import run_in_threadpool

from service.access.auth import Principal
from service.errors import BadRequest, EttError
from service.wire.body import read_body

from . import formats
from .pages import PAGES, PageRequest
from .session import COOKIE, IDLE_S, Sessions

HERE = Path(__file__).resolve().parent
PREFIX = "/ui"
# The sign-in form holds a token and a console path: a few hundred bytes.
LOGIN_MAX_BYTES = 8 * 1024
LOGIN_MAX_FIELDS = 8
LOGIN_DEADLINE_S = 10.0
# Everything the pages load is served from here; inline scripts never run.
CSP = ("default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self';"
       " form-action 'self'; frame-ancestors 'none'; base-uri 'none'")


def _environment() -> Environment:
    env = Environment(loader=FileSystemLoader(HERE / "templates"),
                      autoescape=select_autoescape(("html",)), trim_blocks=True,
                      lstrip_blocks=True)
    env.filters.update(formats.FILTERS)
    env.globals["nav"] = [p for p in PAGES if p.nav]
    env.globals["prefix"] = PREFIX
    return env


def _safe_next(target: str | None) -> str:
    """Only a console path: a sign-in link must not send anyone to another site."""
    if target and target.startswith(PREFIX + "/") and not target.startswith("//"):
        return target
    return PREFIX + "/"


@dataclass(frozen=True)
class Console:
    """What the console's routes share, built by the composition root
    (service.api.context): where pages read, the clock, the SLO file, the sign-in sessions."""

    engine: Engine
    clock: Callable[[], datetime]
    slo_spec: Path | None
    sessions: Sessions


async def console_of(request: Request) -> Console:
    """The app's console (`app.state.console`, set by `create_app`)."""
    return request.app.state.console


TheConsole = Annotated[Console, Depends(console_of)]
ENV = _environment()
router = APIRouter(include_in_schema=False)


def render(name: str, status: int = 200, **context: Any) -> HTMLResponse:
    html = ENV.get_template(name).render(**context)
    return HTMLResponse(html, status_code=status, headers={
        "Content-Security-Policy": CSP, "Cache-Control": "no-store",
        "X-Content-Type-Options": "nosniff"})


def to_login(request: Request) -> Response:
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    if request.headers.get("sec-fetch-site") == "cross-site":
        # A link from elsewhere (an alert in a chat, a runbook) arrives without the
        # SameSite=Strict cookie even when signed in. Load the page once more from
        # here: that navigation is same-site, so the cookie comes along if there is one.
        return render("bounce.html", here=here, user=None)
    return RedirectResponse(f"{PREFIX}/login?next={quote(here, safe='')}", status_code=303)


@router.get("/")
@router.get(PREFIX)
async def root() -> RedirectResponse:
    return RedirectResponse(PREFIX + "/", status_code=307)


@router.get(PREFIX + "/login")
async def login_form(request: Request, console: TheConsole) -> Response:
    if await console.sessions.current(request) is not None:
        return RedirectResponse(_safe_next(request.query_params.get("next")),
                                status_code=303)
    return render("login.html", next=_safe_next(request.query_params.get("next")),
                  message=None, user=None)


@router.post(PREFIX + "/login")
async def login(request: Request, console: TheConsole) -> Response:
    sessions = console.sessions
    # No token yet, so nothing to check first: the form is small and read bounded.
    body = await read_body(request, limit=LOGIN_MAX_BYTES, deadline_s=LOGIN_DEADLINE_S,
                           media_types=("application/x-www-form-urlencoded",))
    try:
        form = parse_qs(body.decode(), max_num_fields=LOGIN_MAX_FIELDS)
    except (UnicodeDecodeError, ValueError):
        raise BadRequest("body: not a sign-in form (token, next)") from None
    token = (form.get("token") or [""])[0].strip()
    target = _safe_next((form.get("next") or [""])[0])
    # The form comes back with its message; a 401 document would only add a browser
    # console error to a page that works as meant. A store that cannot tell is a 503.
    message, status = "Enter a token.", 200
    principal: Principal | None = None
    if token:
        try:
            principal = await sessions.principal_for(token)
        except EttError as exc:
            if exc.status_code == 401:
                message = "That token is not valid (unknown or revoked)."
            else:
                message, status = f"Cannot sign in now: {exc.message}", exc.status_code
    if principal is None:
        return render("login.html", status=status, next=target, message=message, user=None)
    try:
        session_id = sessions.open(token)
    except EttError as exc:
        return render("login.html", status=exc.status_code, next=target,
                      message=f"Cannot sign in now: {exc.message}", user=None)
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(COOKIE, session_id, max_age=int(IDLE_S), path=PREFIX,
                        httponly=True, samesite="strict",
                        secure=request.url.scheme == "https")
    return response


@router.post(PREFIX + "/logout")
async def logout(request: Request, console: TheConsole) -> RedirectResponse:
    console.sessions.close(request.cookies.get(COOKIE))
    response = RedirectResponse(PREFIX + "/login", status_code=303)
    response.delete_cookie(COOKIE, path=PREFIX)
    return response


@router.get(PREFIX + "/search")
async def search(request: Request, console: TheConsole) -> Response:
    if await console.sessions.current(request) is None:
        return to_login(request)
    job_id = request.query_params.get("job_id", "").strip()
    if not job_id:
        return RedirectResponse(PREFIX + "/", status_code=303)
    return RedirectResponse(f"{PREFIX}/jobs/{quote(job_id, safe='')}", status_code=303)


# Every registered page, by the path of its route.
_PAGE_OF = {PREFIX + page.path: page for page in PAGES}


async def show_page(request: Request, console: TheConsole) -> Response:
    """Any registered page: signed in, its figures built off the loop, then rendered."""
    page = _PAGE_OF[request.scope["route"].path]
    try:
        user = await console.sessions.current(request)
    except EttError as exc:
        return render("error.html", status=exc.status_code, message=exc.message, user=None)
    if user is None:
        return to_login(request)
    if any("\x00" in v for v in (*request.path_params.values(),
                                 *request.query_params.values())):
        return render("error.html", status=422, user=user,
                      message="a parameter contains the character U+0000")
    req = PageRequest(engine=console.engine, now=console.clock(), path=dict(request.path_params),
                      query=dict(request.query_params), slo_spec=console.slo_spec)
    try:
        figures = await run_in_threadpool(page.build, req)
    except EttError as exc:
        return render("error.html", status=exc.status_code, message=exc.message, user=user)
    return render(page.template, page=page, user=user, query=req.query, **figures)


for _page in PAGES:
    router.add_api_route(PREFIX + _page.path, show_page, methods=["GET"],
                         response_class=HTMLResponse,
                         name=f"console_{_page.template.removesuffix('.html')}")


def install(app: FastAPI) -> None:
    """The console's routes and its static files (a mount, which a router cannot carry)."""
    app.include_router(router)
    app.mount(PREFIX + "/static", StaticFiles(directory=HERE / "static"), name="console-static")
