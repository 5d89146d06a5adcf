"""A mechanism in one file (docs/EXTENDING.md): each coordinate clipped to [−C, C]."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ldpem.common.mechanisms import Mechanism, register_mechanism
from ldpem.common.mechanisms.base import FloatArray, Needs, NoiseSite


@register_mechanism
@dataclass(frozen=True, kw_only=True)
class LocalBox(Mechanism):
    """Clip every coordinate to [−C, C] (an L∞ box), Gaussian noise on each record's
    report; sensitivity 2C√d."""

    name: ClassVar[str] = "local-box"
    label: ClassVar[str] = "local DP, coordinates clipped"
    noise_site: ClassVar[NoiseSite] = "record"
    needs: ClassVar[Needs] = "clip"

    # The public values a run gives it (needs = "clip": a field named clip), and the
    # noise std the protocol calibrates (Mechanism.calibrated).
    clip: float
    noise_std: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.clip) and self.clip > 0):
            raise ValueError(f"clip must be a finite number > 0, got {self.clip!r}")
        if not (math.isfinite(self.noise_std) and self.noise_std >= 0):
            raise ValueError(f"noise_std must be a finite number >= 0, got {self.noise_std!r}")

    def contributions(self, gradients: FloatArray) -> FloatArray:
        # NaN counts as 0; ±inf goes to ±C: every record gets a bounded contribution.
        clipped: FloatArray = np.clip(np.nan_to_num(gradients, nan=0.0), -self.clip, self.clip)
        return clipped

    def record_bound(self, d: int) -> float:
        return self.clip

    def sensitivity(self, d: int) -> float:
        return 2.0 * self.clip * math.sqrt(d)
