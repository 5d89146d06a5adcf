"""The run request of ``ldpem run create``, as the operator writes it and as it is posted.

* The roster of a secure-aggregation run is a file the consortium distributes
  (``roster.json``); the coordinator takes only its content. ``--roster FILE`` inlines it,
  and so does ``"roster": "roster.json"`` in the request file (a file name relative to the
  request file's directory).
* ``delta`` left out takes the coordinator's default n^-1.1 (n enrolled records), which an
  agent started with a smaller ``--delta`` refuses: ``default_delta_warning`` says so.
* ``--plan`` sets rounds, schedule and final; ``planned_setting`` states what it set.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ldpem.common.core.errors import UserError

__all__ = [
    "PLANNED",
    "default_delta_warning",
    "describe_setting",
    "planned_setting",
    "read_request",
    "requested_setting",
]

#: The request fields ``run create --plan`` sets (``ldpem.run.plan``).
PLANNED = ("rounds", "schedule", "final")


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise UserError(f"{path}: cannot read the {what} ({error.strerror})") from None
    except ValueError as error:
        raise UserError(f"{path}: not valid JSON ({error})") from None


def read_request(config: Path, roster: Path | None) -> Any:
    """The request of file ``config`` with its roster inlined: from ``roster`` (--roster),
    or from the file its ``"roster"`` names, relative to ``config``'s directory."""
    request = _read_json(config, "run request")
    if not isinstance(request, dict):
        return request  # refused by the coordinator (or --plan), naming the body
    named = request.get("roster")
    if roster is not None:
        if named is not None:
            raise UserError(
                f"{config} has a roster already; give it there or with --roster {roster}, not both"
            )
        request["roster"] = _read_json(roster, "roster")
    elif isinstance(named, str):
        request["roster"] = _read_json(config.parent / named, "roster")
    return request


def default_delta_warning(request: Any, params: dict[str, Any]) -> str | None:
    """The warning for a run created without ``delta``: the default it got and its fix."""
    if not isinstance(request, dict) or "delta" in request:
        return None
    records = sum(int(h.get("records", 0)) for h in request.get("hospitals", []))
    return (
        f'the request states no "delta": the run got the default delta = n^-1.1 = '
        f"{params['delta']:.3g} (n = {records} enrolled records), and an agent whose --delta "
        'is smaller refuses it; state the agents\' delta in the request ("delta": 1e-06 for '
        "agents started with --delta 1e-6)"
    )


def planned_setting(request: dict[str, Any]) -> dict[str, Any]:
    """The setting ``--plan`` applied to ``request``: its rounds, schedule and final."""
    return {name: request[name] for name in PLANNED}


def requested_setting(request: dict[str, Any]) -> dict[str, Any]:
    """The rounds, schedule and final of ``request`` as written, a field left out at its
    default (schedule equal, final last; rounds has none)."""
    defaults = {"schedule": "equal", "final": "last"}
    return {name: request.get(name, defaults.get(name)) for name in PLANNED}


def describe_setting(setting: dict[str, Any], before: dict[str, Any] | None = None) -> str:
    """``rounds 10, schedule equal, final last``; with the setting ``before`` it, what
    changed: ``rounds 5 -> 10, schedule equal, final last``."""
    before = before or {}
    return ", ".join(
        f"{name} {before[name]} -> {value}"
        if before.get(name) is not None and before[name] != value
        else f"{name} {value}"
        for name, value in setting.items()
    )
