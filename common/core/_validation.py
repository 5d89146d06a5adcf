"""Parameter checks shared by the numerical core: one line that names the parameter and value."""

from __future__ import annotations

import math

__all__ = ["check_count", "check_open_unit", "check_positive"]


def check_positive(name: str, value: float) -> float:
    """Return ``value`` as a float if it is finite and > 0, else raise ValueError."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number > 0, got {value!r}") from None
    if not math.isfinite(number) or number <= 0.0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return number


def check_open_unit(name: str, value: float) -> float:
    """Return ``value`` as a float if 0 < value < 1, else raise ValueError."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number in (0, 1), got {value!r}") from None
    if not 0.0 < number < 1.0:
        raise ValueError(f"{name} must be in (0, 1), got {value!r}")
    return number


def check_count(name: str, value: int, *, minimum: int = 1) -> int:
    """Return ``value`` if it is an integer ≥ ``minimum``, else raise ValueError."""
    if isinstance(value, bool) or int(value) != value or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)
