"""Why the coordinator refuses a request: plain exceptions of the domain.

The run, round and report logic raises these with a one-line message; only
``ldpem.server.app`` knows which HTTP status each one answers (``STATUS``).
"""

from __future__ import annotations

__all__ = ["Conflict", "Forbidden", "Invalid", "NotFound", "Refused", "shown_run"]


class Refused(Exception):
    """A request the coordinator refuses, with a one-line ``message``."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(Refused):
    """No such run."""


class Forbidden(Refused):
    """The caller's token does not allow this (another run or hospital)."""


class Conflict(Refused):
    """The run's state does not allow it now: the round is not open, a report differs from
    the one accepted before, a token is taken."""


class Invalid(Refused):
    """Out of range or inconsistent with the run: parameters, a report's contents."""


def shown_run(run_id: str) -> str:
    """A run id from the URL as it may appear in a one-line message: quoted, escaped,
    shortened."""
    return repr(run_id[:40]) + ("…" if len(run_id) > 40 else "")
