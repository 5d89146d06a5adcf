"""The order in which hospitals are listed to people: natural, h1, h2, …, h10, not the
strings' h1, h10, h11, h2. Display only: nothing computed depends on it (the reports'
sums keep the store's order)."""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["natural_key", "natural_sorted"]

_NUMBERS = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple[tuple[str | int, ...], str]:
    """A sort key that compares the runs of digits of ``name`` as numbers (re.split puts
    the text at even positions and the numbers at odd ones, so two keys compare like with
    like); ties (h01, h1) by the name itself."""
    parts = _NUMBERS.split(name)
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts)), name


def natural_sorted(names: Iterable[str]) -> list[str]:
    """``names`` in natural order (``natural_key``)."""
    return sorted(names, key=natural_key)
