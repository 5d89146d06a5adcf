"""Health check, the HTML status pages and the Prometheus metrics.

``/healthz`` is open to all (``public``). The pages and ``/metrics`` (``router``) reveal run
state: they need the read or the admin token unless the coordinator runs with
``--public-status``. Pages also accept the token as ``?token=`` (answered by a redirect to
the same page without it, setting an HttpOnly cookie) or from that cookie, so a browser can
open them; ``/metrics`` takes a bearer token only, as Prometheus sends it.
"""

from __future__ import annotations

import html
import time

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ldpem.server.deps import READ_COOKIE, CoordinatorDep, OptionalTokenDep, ReaderDep, can_read
from ldpem.server.deps import page_token as _page_token
from ldpem.server.metrics import Metrics
from ldpem.server.pages.kit import page
from ldpem.server.pages.status import index_page, run_page

__all__ = ["public", "router"]

public = APIRouter(tags=["status"])
router = APIRouter(tags=["status"])


@public.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


def _login(request: Request, status: int, problem: str) -> HTMLResponse:
    body = (
        f"<p>{html.escape(problem)}</p>"
        f'<form method="get" action="{html.escape(request.url.path)}">'
        '<label>Read token or admin token: <input type="password" name="token" '
        'autocomplete="off" required></label> <button>Open</button></form>'
        '<p class="note">The token is kept in an HttpOnly cookie of this browser for the '
        "session. Operators start the coordinator with <code>--public-status</code> to serve "
        "these pages without a token.</p>"
    )
    return HTMLResponse(
        page("ldpem coordinator: token needed", body, refresh=False),
        status_code=status,
        headers={"WWW-Authenticate": "Bearer", "Cache-Control": "no-store"},
    )


def _guard(request: Request, bearer: str | None) -> Response | None:
    """None when the page may be shown; otherwise the answer to send instead."""
    token, from_query = _page_token(request, bearer)
    if not can_read(request, token):
        if token is None:
            return _login(request, 401, "These pages show confidential run state.")
        return _login(request, 403, "This token may not read run state.")
    if from_query and token is not None and not request.app.state.settings.public_status:
        # Out of the address bar, history and Referer: the same page, the token in a cookie.
        kept = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
        target = request.url.replace_query_params(**dict(kept)) if kept else request.url.path
        response = RedirectResponse(str(target), status_code=303)
        response.set_cookie(
            READ_COOKIE,
            token,
            httponly=True,
            samesite="lax",
            secure=request.url.scheme == "https",
            path="/",
        )
        response.headers["Cache-Control"] = "no-store"
        return response
    return None


def _html(text: str) -> HTMLResponse:
    # Private pages: no shared cache may keep them.
    return HTMLResponse(text, headers={"Cache-Control": "no-store"})


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def index(
    request: Request, coordinator: CoordinatorDep, bearer: OptionalTokenDep
) -> Response:
    denied = _guard(request, bearer)
    if denied is not None:
        return denied
    return _html(index_page(coordinator.list_runs(), now=time.time()))


@router.get("/runs/{run_id}", response_class=HTMLResponse, include_in_schema=False)
async def run_status(
    run_id: str, request: Request, coordinator: CoordinatorDep, bearer: OptionalTokenDep
) -> Response:
    denied = _guard(request, bearer)
    if denied is not None:
        return denied
    return _html(run_page(coordinator.run_view(run_id)))


@router.get("/metrics", include_in_schema=False, dependencies=[ReaderDep])
async def metrics(request: Request) -> Response:
    registry: Metrics = request.app.state.metrics
    return Response(generate_latest(registry.registry), media_type=CONTENT_TYPE_LATEST)
