"""Log lines of the coordinator and the agent: context fields, JSON lines, no tokens.

The formatter and filters live here, below the service layers, so that ``ldpem.server``
and ``ldpem.client`` can attach context without importing the command line; installing
them on a stream (I/O) is ``ldpem.logsetup``'s job, called by ``ldpem coordinator`` and
``ldpem client``.

``--log-format json`` writes one JSON object per line::

    {"time": "2026-11-26T03:25:24.512Z", "level": "INFO", "logger": "ldpem.server",
     "message": "run 3f… round 2: report from h1 accepted", "run": "3f…", "round": 2,
     "hospital": "h1"}

``run``, ``round`` and ``hospital`` appear when known: from ``extra={"run": …}`` on the
call, or from ``log_context(run=…, hospital=…)`` around it (a context variable, so it
follows asyncio tasks). An access line of uvicorn (logger ``uvicorn.access``) also has
``method``, ``path`` (without the query string), ``status`` and ``duration_ms``, set by
``AccessFields``, so that a log pipeline can filter on them instead of parsing
``message``::

    {"time": "…", "level": "INFO", "logger": "uvicorn.access",
     "message": "127.0.0.1:50412 - \"POST /v1/runs/3f…/rounds/2/reports HTTP/1.1\" 200",
     "method": "POST", "path": "/v1/runs/3f…/rounds/2/reports", "status": 200,
     "duration_ms": 4.2}

``duration_ms`` runs from the request's start (``request_clock``, entered by the
coordinator's outermost middleware) to the start of its response, when uvicorn logs the
line. No other attribute of a record is written, and every message, text or JSON, passes
through ``RedactTokens``: a bearer token or a ``token=`` query value (uvicorn's access log
prints the query string of a status page opened with ``?token=``) is replaced by
``<redacted>``.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import re
import time
from collections.abc import Iterator
from typing import Any

__all__ = [
    "ACCESS_FIELDS",
    "CONTEXT_FIELDS",
    "AccessFields",
    "ContextFilter",
    "JsonFormatter",
    "RedactTokens",
    "log_context",
    "request_clock",
]

#: Fields of a JSON line beyond time, level, logger and message, when known.
CONTEXT_FIELDS = ("run", "round", "hospital")
#: Fields of an access line (uvicorn.access), after the context fields.
ACCESS_FIELDS = ("method", "path", "status", "duration_ms")
#: The logger of uvicorn's access lines.
_ACCESS_LOGGER = "uvicorn.access"

_context: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "ldpem_log_context", default=None
)
#: time.perf_counter() at the start of the request being served, where one is.
_request_start: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "ldpem_request_start", default=None
)
_SECRETS = re.compile(r"(?i)(bearer\s+|token=)[^\s&\"',;]+")


@contextlib.contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Attach ``fields`` (run, round, hospital) to every record logged inside the block."""
    unknown = set(fields) - set(CONTEXT_FIELDS)
    if unknown:
        raise ValueError(f"log context fields must be among {CONTEXT_FIELDS}, got {unknown}")
    token = _context.set({**(_context.get() or {}), **fields})
    try:
        yield
    finally:
        _context.reset(token)


@contextlib.contextmanager
def request_clock() -> Iterator[None]:
    """Mark the start of a request: the access line logged inside the block (uvicorn logs
    it when the response starts) gets its ``duration_ms``."""
    token = _request_start.set(time.perf_counter())
    try:
        yield
    finally:
        _request_start.reset(token)


class AccessFields(logging.Filter):
    """Sets ``method``, ``path``, ``status`` and ``duration_ms`` on uvicorn's access records
    from their arguments (client, method, path with query, HTTP version, status). Must run
    before ``RedactTokens``, which drops the arguments of a message it redacts. The path
    loses its query string: a status page's ``?token=`` must not reach a field."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if record.name != _ACCESS_LOGGER or not isinstance(args, tuple) or len(args) != 5:
            return True
        _client, method, path, _version, status = args
        record.method = str(method)
        record.path = str(path).split("?", 1)[0]
        if isinstance(status, int):
            record.status = status
        started = _request_start.get()
        if started is not None:
            record.duration_ms = round((time.perf_counter() - started) * 1000.0, 3)
        return True


class ContextFilter(logging.Filter):
    """Copies the fields of ``log_context`` onto records that do not set them already."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in (_context.get() or {}).items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


class RedactTokens(logging.Filter):
    """Replaces bearer tokens and ``token=`` values in the message by ``<redacted>``."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = _SECRETS.sub(r"\1<redacted>", message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, message, the
    context fields that are known and, for an exception, its traceback as ``error``."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        line: dict[str, Any] = {
            "time": f"{stamp}.{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in (*CONTEXT_FIELDS, *ACCESS_FIELDS):
            value = getattr(record, key, None)
            if value is not None:
                line[key] = value
        if record.exc_info:
            line["error"] = _SECRETS.sub(r"\1<redacted>", self.formatException(record.exc_info))
        return json.dumps(line, ensure_ascii=False, default=str)
