"""The planning layer (docs/ARCHITECTURE.md, "Layers"): simulation, studies, forecasts
and plans, on the core, secagg and the wire.

The package keeps exporting the planner's names (``plan.py``), as before the split."""

from __future__ import annotations

from ldpem.common.planning import plan
from ldpem.common.planning.plan import *  # noqa: F403

__all__ = plan.__all__
