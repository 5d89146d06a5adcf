"""One line for pydantic validation errors, as the coordinator and the agent show them
(``ldpem.common.wire`` re-exports ``describe_errors``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["describe_errors"]


def _location(loc: Sequence[Any]) -> str:
    """``("body", "total", 1)`` → ``total[1]``; ``("query", "wait")`` → ``query wait``;
    user-chosen parts (unknown keys) are shortened and escaped so they stay on one line."""
    parts = list(loc)
    prefix = ""
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        kind = parts.pop(0)
        prefix = "" if kind == "body" else f"{kind} "
    out = ""
    for part in parts:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        else:
            text = str(part)
            if len(text) > 24 or not text.isprintable() or text != text.strip():
                text = ascii(text[:24]) + ("…" if len(text) > 24 else "")
            out += f".{text}" if out else text
    return prefix + (out or "body")


def describe_errors(errors: Sequence[Mapping[str, Any]]) -> str:
    """One line for pydantic validation errors: the first error's location and reason, and
    how many more there are. Never the input value (it may be huge, non-finite or secret)."""
    if not errors:
        return "invalid request"
    first = errors[0]
    reason = str(first.get("msg", "invalid")).replace("\n", " ").replace("\r", " ")
    context = first.get("ctx") or {}
    if first.get("type") == "json_invalid" and "error" in context:
        reason = f"not valid JSON ({context['error']})"
    elif first.get("type") == "extra_forbidden":
        reason = "unknown field"
    if len(reason) > 200:
        reason = reason[:200] + "…"
    more = len(errors) - 1
    tail = f" (and {more} more error{'s' if more > 1 else ''})" if more else ""
    return f"{_location(first.get('loc', ()))}: {reason}{tail}"
