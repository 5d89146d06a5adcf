"""How long a coordinator that cannot be reached is waited for: one number that the agent
(``ldpem client --give-up``, ``client/link.py``) and the operator's watcher (``ldpem run
status --wait``) share, so that a watcher never gives up on a run its agents still follow
through a coordinator restart. A module of its own, importing nothing, so that the command
line's parsers take it without loading the agent."""

from __future__ import annotations

__all__ = ["GIVE_UP"]

#: Seconds without an answer from the coordinator (connection errors, 5xx) after which an
#: agent gives up: long enough for a coordinator restart or a network outage of minutes.
GIVE_UP = 600.0
