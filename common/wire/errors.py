"""One line for pydantic validation errors, as the coordinator and the agent show them
(``ldpem.common.wire`` re-exports ``describe_errors``)."""

from __future__ import annotations

import difflib
import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["describe_errors", "field_names"]

#: An unknown field's name longer than this gets no "did you mean" (a hostile body's keys
#: may be a megabyte long; a typo is not).
_SUGGESTED_UP_TO = 64


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


def _model_in(annotation: Any) -> Any:
    """The pydantic model inside a field's annotation (``list[HospitalEnrolment] | None`` →
    HospitalEnrolment), or None."""
    if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
        return annotation
    for argument in typing.get_args(annotation):
        found = _model_in(argument)
        if found is not None:
            return found
    return None


def field_names(model: Any, loc: Sequence[Any]) -> tuple[str, ...]:
    """The fields of the object at ``loc`` (an error's location without its last part) in
    the pydantic ``model``: ("hospitals", 0) of RunCreate → HospitalEnrolment's fields."""
    current = model
    for part in loc:
        if part in ("body", "query", "path", "header", "cookie") and current is model:
            continue
        if isinstance(part, int):
            continue
        field = getattr(current, "model_fields", {}).get(part)
        current = None if field is None else _model_in(field.annotation)
        if current is None:
            return ()
    return tuple(getattr(current, "model_fields", ()))


def _unknown(error: Mapping[str, Any], known: Iterable[str]) -> str:
    """``unknown field 'hospital' (did you mean 'hospitals'?)``: the field's location, and
    the closest of ``known`` (the fields at that place) when one is close."""
    loc = list(error.get("loc", ()))
    name = loc[-1] if loc else ""
    shown = _location(loc)
    shown = shown if "'" in shown or '"' in shown else f"'{shown}'"  # escaped: quoted already
    guess = ""
    if isinstance(name, str) and len(name) <= _SUGGESTED_UP_TO:
        close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
        guess = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown field {shown}{guess}"


def describe_errors(errors: Sequence[Mapping[str, Any]], *, model: Any = None) -> str:
    """One line for pydantic validation errors: the first error's location and reason, and
    how many more there are. Never the input value (it may be huge, non-finite or secret).
    An unknown field comes first, before a missing one, which is often the same field
    misspelt; with the ``model`` validated, the nearest known field is suggested."""
    if not errors:
        return "invalid request"
    errors = sorted(errors, key=lambda e: e.get("type") != "extra_forbidden")
    first = errors[0]
    reason = str(first.get("msg", "invalid")).replace("\n", " ").replace("\r", " ")
    context = first.get("ctx") or {}
    if first.get("type") == "json_invalid" and "error" in context:
        reason = f"not valid JSON ({context['error']})"
    elif first.get("type") == "extra_forbidden":
        loc = list(first.get("loc", ()))
        parent = loc[:-1]
        # The fields at that place: the model's, and the missing ones (a typo's target).
        known = [
            *(field_names(model, parent) if model is not None else ()),
            *(
                str(e["loc"][-1])
                for e in errors
                if e.get("type") == "missing" and e.get("loc") and list(e["loc"])[:-1] == parent
            ),
        ]
        reason = _unknown(first, known)
    # Never cut: the reasons are the validators' own words (never an input value), and
    # they end with the fix ("…; use secagg_topology mesh (auto picks it)").
    more = len(errors) - 1
    tail = f" (and {more} more error{'s' if more > 1 else ''})" if more else ""
    if first.get("type") == "extra_forbidden":
        return f"{reason}{tail}"
    return f"{_location(first.get('loc', ()))}: {reason}{tail}"
