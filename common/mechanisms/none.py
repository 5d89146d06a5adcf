"""Non-private gradient EM: the raw gradients, no noise (a baseline)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ldpem.common.mechanisms.base import FloatArray, Mechanism, NoiseSite
from ldpem.common.mechanisms.registry import register_mechanism

__all__ = ["NoPrivacy"]


@register_mechanism
@dataclass(frozen=True, kw_only=True)
class NoPrivacy(Mechanism):
    """Non-private gradient EM: contributions are the raw gradients, no noise.

    Unlike the private mechanisms it refuses NaN and ±inf gradients (ValueError): it has no
    bound to map them to, its output reveals the records anyway, and a silent 0 or inf
    would corrupt the estimate of a run that makes no privacy claim.
    """

    name = "none"
    label = "non-private EM"
    noise_site: ClassVar[NoiseSite] = "nowhere"
    noise_std = 0.0

    def contributions(self, gradients: FloatArray) -> FloatArray:
        if not np.all(np.isfinite(gradients)):
            raise ValueError("mechanism 'none' needs finite gradients, got NaN or inf")
        return gradients

    def record_bound(self, d: int) -> float:
        return math.inf

    def sensitivity(self, d: int) -> float:
        return math.inf
