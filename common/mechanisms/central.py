"""The central model of Algorithm 2: a trusted curator averages the truncated gradients and
adds the noise once."""

from __future__ import annotations

from typing import ClassVar

from ldpem.common.mechanisms.base import NoiseSite, ScaleRule
from ldpem.common.mechanisms.local import LocalTruncation
from ldpem.common.mechanisms.registry import register_mechanism

__all__ = ["CentralTruncation"]


@register_mechanism
class CentralTruncation(LocalTruncation):
    """Central model of Algorithm 2: the curator averages T(g_i) over the m records of a round
    and adds N(0, σ_r² I_d) once (docs/MATH.md (3.4), with the paper's s/n typo corrected to
    s/m)."""

    name = "central"
    label = "central DP (trusted curator)"
    noise_site: ClassVar[NoiseSite] = "aggregator"
    scale_rule: ClassVar[ScaleRule | None] = "square-root"
