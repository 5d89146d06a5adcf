"""The coordinator's FastAPI application: ``create_app(settings)``.

Routes live in ``ldpem.server.routes``; the protocol is under ``/v1`` (see
``ldpem.common.wire``). A background task checks round deadlines every ``settings.tick``
seconds. Refused requests answer ``{"detail": "<one line>"}`` with a 4xx status.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from ldpem import __version__
from ldpem.common.core.plugins import ensure_plugins
from ldpem.common.infra.logs import request_clock
from ldpem.common.secagg import SecAggError, SecAggRefused
from ldpem.common.wire import API_PREFIX, describe_errors
from ldpem.server.compression import GZIP_LEVEL, GZIP_MINIMUM_BYTES, Compression
from ldpem.server.confidence import ConfidenceOptions
from ldpem.server.coordinator import Coordinator, hash_token
from ldpem.server.forecast import ForecastOptions
from ldpem.server.metrics import MeteredStore, Metrics, MetricsMiddleware
from ldpem.server.refusals import Conflict, Forbidden, Invalid, NotFound, Refused
from ldpem.server.routes import rounds, runs, secagg, status
from ldpem.server.settings import Settings
from ldpem.server.store import Store

__all__ = ["GZIP_LEVEL", "GZIP_MINIMUM_BYTES", "BodySizeLimit", "RequestClock", "create_app"]

log = logging.getLogger("ldpem.server")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class RequestClock:
    """ASGI middleware: runs each HTTP request inside ``request_clock``, so the access
    line uvicorn logs when the response starts carries the request's ``duration_ms``
    (uvicorn runs each request in a task of its own: the clock is that request's)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with request_clock():
            await self.app(scope, receive, send)


class BodySizeLimit:
    """ASGI middleware: 413 for a request body larger than ``limit`` bytes (by its
    Content-Length or, when streamed, as soon as the bytes read exceed it)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def _reject(self, send: Send) -> None:
        response = JSONResponse(
            {"detail": f"request body larger than the limit of {self.limit} bytes"},
            status_code=413,
        )
        await response({"type": "http"}, _no_receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    too_big = int(value) > self.limit
                except ValueError:
                    too_big = False
                if too_big:
                    await self._reject(send)
                    return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return
            body += message.get("body", b"")
            if len(body) > self.limit:
                await self._reject(send)
                return
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _no_receive() -> Message:  # pragma: no cover - never called by JSONResponse
    return {"type": "http.disconnect"}


#: The HTTP status of each refusal of the domain (``ldpem.server.refusals``).
STATUS: dict[type[Refused], int] = {NotFound: 404, Forbidden: 403, Conflict: 409, Invalid: 422}


def _describe(app: FastAPI, paths: dict[str, Any]) -> None:
    """Add ``paths`` (routes that FastAPI does not describe) to ``app``'s OpenAPI schema."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        schema = generate()  # cached by FastAPI in app.openapi_schema
        schema.setdefault("paths", {}).update(paths)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def create_app(settings: Settings, *, store: Store | None = None) -> FastAPI:
    """The coordinator app over ``settings.state`` (or an explicit ``store``, whose
    commits are then not measured). Reads of run state need ``settings.read_token`` or the
    admin token unless ``settings.public_status`` (see ``ldpem.server.deps``)."""
    if not settings.admin_token:
        raise ValueError("settings.admin_token must be set")
    # The run requests name the plugins' models and mechanisms too (docs/EXTENDING.md).
    ensure_plugins()
    metrics = Metrics()
    store = store if store is not None else MeteredStore(settings.state, metrics)
    metrics.attach(store)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        coordinator = Coordinator(
            store,
            admin_token=settings.admin_token,
            range_sigmas=settings.range_sigmas,
            max_noise_factor=settings.max_noise_factor,
            forecast=ForecastOptions(
                seeds=settings.forecast_seeds,
                sensitivity_seeds=settings.forecast_sensitivity_seeds,
                max_records=settings.forecast_max_records,
                workers=settings.forecast_workers,
                scheduler=settings.forecast_scheduler,
            ),
            confidence=ConfidenceOptions(
                draws=settings.confidence_draws, level=settings.confidence_level
            ),
            commit_window=settings.commit_window,
        )
        app.state.coordinator = coordinator
        coordinator.resume_derived()

        async def ticker() -> None:
            while True:
                try:
                    await coordinator.check_deadlines()
                except Exception:  # keep checking deadlines whatever one tick did
                    log.exception("deadline check failed")
                await asyncio.sleep(settings.tick)

        task = asyncio.create_task(ticker())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await coordinator.close()
            store.close()

    app = FastAPI(
        title="ldpem coordinator",
        version=__version__,
        description="Federated gradient EM under local differential privacy: the coordinator.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.read_token_hash = hash_token(settings.read_token) if settings.read_token else None

    @app.exception_handler(Refused)
    async def refused(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, Refused)
        code = next(code for kind, code in STATUS.items() if isinstance(error, kind))
        return JSONResponse({"detail": error.message}, status_code=code)

    @app.exception_handler(SecAggError)
    async def secagg_error(request: Request, error: Exception) -> JSONResponse:
        # A safety net: the secagg routes map their refusals themselves, but a secure
        # aggregation error that escapes them is the request's fault or the round's state,
        # never a 500 (its message is one line and holds no secret).
        code = 422 if isinstance(error, SecAggRefused) else 409
        return JSONResponse({"detail": str(error)}, status_code=code)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, error: RequestValidationError) -> JSONResponse:
        # FastAPI's own handler echoes the input back: a NaN or infinity there cannot be
        # encoded (a 500), and a huge or secret value would be sent back. One line instead,
        # with the nearest field of the route's body model for an unknown one.
        body = getattr(request.scope.get("route"), "body_field", None)
        model = getattr(getattr(body, "field_info", None), "annotation", None)
        return JSONResponse(
            {"detail": describe_errors(error.errors(), model=model)}, status_code=422
        )

    secagg.add_routes(app.router)  # first: the most frequent requests, matched first
    app.include_router(runs.router, prefix=API_PREFIX)
    app.include_router(rounds.router, prefix=API_PREFIX)
    app.include_router(status.public)
    app.include_router(status.router)
    _describe(app, secagg.OPENAPI_PATHS)
    app.add_middleware(BodySizeLimit, limit=settings.max_body)
    # Compresses what the coordinator sends (docs/SECAGG.md "Compressed responses": why it
    # leaks nothing); inside the metrics and the clock, which see the request as before.
    app.add_middleware(Compression)
    # Outside the body limit, so that it also counts the reports the body limit refuses.
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    # Outermost: a request's duration includes every other middleware.
    app.add_middleware(RequestClock)
    return app
