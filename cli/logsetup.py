"""Log set-up of ``ldpem coordinator`` and ``ldpem client``: text or JSON lines on stderr.

The line formats, the context fields and the token redaction are ``ldpem.common.infra.logs``.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

from ldpem.common.infra.logs import AccessFields, ContextFilter, JsonFormatter, RedactTokens

__all__ = ["TEXT_FORMAT", "setup_logging"]

TEXT_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"


class _StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to ``sys.stderr`` as it is when the record is emitted, not as it was when the
    handler was made (a command run in-process, as the tests do, sees a swapped stderr)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def setup_logging(level: str, log_format: str) -> logging.Handler | None:
    """Send every logger's records to stderr in ``log_format`` ("text" or "json") at
    ``level``; returns the handler installed on the root logger (in place of one an earlier
    call installed). Like ``logging.basicConfig``, leaves alone a logging the embedding
    program set up (pytest, when a test runs a command in-process): then returns None."""
    if log_format not in ("text", "json"):
        raise ValueError(f"log format must be 'text' or 'json', got {log_format!r}")
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"log level must be debug, info, warning or error, got {level!r}")
    root = logging.getLogger()
    if any(not isinstance(h, _StderrHandler) for h in root.handlers):
        return None
    handler = _StderrHandler()
    handler.setFormatter(
        JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    )
    handler.addFilter(ContextFilter())
    # Before RedactTokens: it drops the arguments of a message it redacts, and the access
    # fields are read from them.
    handler.addFilter(AccessFields())
    handler.addFilter(RedactTokens())
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)
    return handler
