"""What ``ldpem run status --wait`` ends with: the finished run's estimate β̂ and its
confidence intervals, which the coordinator adds once its parametric bootstrap is done
(``ldpem.common.planning.confidence``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ldpem.common.planning.confidence import region_lines

__all__ = ["CONFIDENCE_WAIT", "await_confidence", "estimate_lines"]

#: Seconds ``run status --wait`` waits, once the run finished, for its confidence region.
CONFIDENCE_WAIT = 300.0


def await_confidence(
    run: dict[str, Any], fetch: Callable[[], dict[str, Any]], interval: float
) -> dict[str, Any]:
    """``run`` (its JSON) once its confidence region is no longer pending (stored, failed,
    or none asked for: a coordinator with ``confidence_draws`` 0, or one older than
    regions), polling ``fetch`` every ``interval`` seconds; as it is after
    ``CONFIDENCE_WAIT`` seconds."""
    end = time.monotonic() + CONFIDENCE_WAIT
    while "confidence" in run.get("pending", []) and time.monotonic() < end:
        time.sleep(interval)
        run = fetch()
    return run


def estimate_lines(run: dict[str, Any]) -> list[str]:
    """A finished run's estimate β̂ (its ``beta``) with its confidence intervals, or alone
    when the coordinator has none."""
    beta = [float(v) for v in run["beta"]]
    if run.get("confidence") is None:
        shown = ", ".join(f"{v:.3f}" for v in beta)
        return [f"estimate β̂ = [{shown}] (no confidence region from the coordinator)"]
    return ["estimate β̂ and its confidence intervals:", *region_lines(run["confidence"], beta)]
