"""The clipped baseline in the central model (Algorithm 1 as printed)."""

from __future__ import annotations

from typing import ClassVar

from ldpem.common.mechanisms.base import NoiseSite
from ldpem.common.mechanisms.local_clip import LocalClipped
from ldpem.common.mechanisms.registry import register_mechanism

__all__ = ["CentralClipped"]


@register_mechanism
class CentralClipped(LocalClipped):
    """Clipped baseline in the central model (Algorithm 1 as printed): the curator averages
    the clipped gradients of a round and adds N(0, σ_r² I_d) once; sensitivity 2C/m."""

    name = "central-clip"
    label = "clipped central DP"
    noise_site: ClassVar[NoiseSite] = "aggregator"
    #: The paper's baseline only: a federated run has no trusted curator for it.
    federated = False
