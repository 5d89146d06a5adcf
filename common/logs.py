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
follows asyncio tasks). No other attribute of a record is written, and every message,
text or JSON, passes through ``RedactTokens``: a bearer token or a ``token=`` query value
(uvicorn's access log prints the query string of a status page opened with ``?token=``)
is replaced by ``<redacted>``.
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
    "CONTEXT_FIELDS",
    "ContextFilter",
    "JsonFormatter",
    "RedactTokens",
    "log_context",
]

#: Fields of a JSON line beyond time, level, logger and message, when known.
CONTEXT_FIELDS = ("run", "round", "hospital")

_context: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "ldpem_log_context", default=None
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
        for key in CONTEXT_FIELDS:
            value = getattr(record, key, None)
            if value is not None:
                line[key] = value
        if record.exc_info:
            line["error"] = _SECRETS.sub(r"\1<redacted>", self.formatException(record.exc_info))
        return json.dumps(line, ensure_ascii=False, default=str)
