"""A finished run's confidence region on the wire: what ``run status`` shows once the
coordinator's parametric bootstrap (``ldpem.common.planning.confidence``) is done."""

from __future__ import annotations

from ldpem.common.wire.base import Schema

__all__ = ["ConfidenceRegion"]


class ConfidenceRegion(Schema):
    """A region at ``level`` around the run's reported estimate β̂ (d): coordinate j's
    interval [low[j], high[j]] and the radius r of ‖β − β̂‖₂ ≤ r (up to sign for the
    symmetric models), from ``draws`` bootstrap runs (``method``). An end or radius is
    None where the draws diverged (unbounded)."""

    level: float
    low: list[float | None]
    high: list[float | None]
    radius: float | None
    draws: int
    method: str
