"""The audit layer (docs/ARCHITECTURE.md, "Layers"): the empirical privacy audit.

The package keeps exporting the names of ``empirical.py``."""

from __future__ import annotations

from ldpem.common.audit import empirical
from ldpem.common.audit.empirical import *  # noqa: F403

__all__ = empirical.__all__
