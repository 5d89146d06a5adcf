"""The local model's mechanism (docs/MATH.md (3.3)): smoothed soft truncation per record,
Gaussian noise on each record's report."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ldpem.common.core._validation import check_positive
from ldpem.common.core.calibration import truncation_sensitivity
from ldpem.common.core.truncation import smoothed_truncation
from ldpem.common.core.truncation_bound import truncation_bound
from ldpem.common.mechanisms.base import (
    FloatArray,
    Mechanism,
    Needs,
    NoiseSite,
    ScaleRule,
    _check_noise_std,
)
from ldpem.common.mechanisms.registry import register_mechanism

__all__ = ["LocalTruncation"]


@register_mechanism
@dataclass(frozen=True, kw_only=True)
class LocalTruncation(Mechanism):
    """Local model (docs/MATH.md (3.3)): report T(g_i) + N(0, σ_r² I_d) per record.

    Parameters
    ----------
    scale : float
        s > 0, the truncation scale.
    smoothing : float
        β_s > 0, the precision of the smoothing noise.
    noise_std : float
        σ_r ≥ 0, the per-coordinate std of the Gaussian noise on each report.
    """

    name = "local"
    label = "local DP (per record)"
    noise_site: ClassVar[NoiseSite] = "record"
    needs: ClassVar[Needs] = "scale"
    scale_rule: ClassVar[ScaleRule | None] = "fourth-root"

    scale: float
    smoothing: float
    noise_std: float

    def __post_init__(self) -> None:
        # Validated once, here; frozen afterwards.
        object.__setattr__(self, "scale", check_positive("scale", self.scale))
        object.__setattr__(self, "smoothing", check_positive("smoothing", self.smoothing))
        object.__setattr__(self, "noise_std", _check_noise_std(self.noise_std))

    def contributions(self, gradients: FloatArray) -> FloatArray:
        return smoothed_truncation(gradients, self.scale, self.smoothing)

    def record_bound(self, d: int) -> float:
        return self.scale * truncation_bound(self.smoothing)

    def sensitivity(self, d: int) -> float:
        return truncation_sensitivity(self.scale, d, smoothing=self.smoothing)
