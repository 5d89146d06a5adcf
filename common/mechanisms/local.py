"""The local model's mechanism (docs/MATH.md (3.3)): smoothed soft truncation per record,
Gaussian noise on each record's report."""

from __future__ import annotations

from typing import ClassVar

from ldpem.common._validation import check_positive
from ldpem.common.calibration import truncation_sensitivity
from ldpem.common.mechanisms.base import (
    FloatArray,
    Mechanism,
    Needs,
    NoiseSite,
    ScaleRule,
    _check_noise_std,
    register_mechanism,
)
from ldpem.common.truncation import smoothed_truncation
from ldpem.common.truncation_bound import truncation_bound

__all__ = ["LocalTruncation"]


@register_mechanism
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

    def __init__(self, *, scale: float, smoothing: float, noise_std: float) -> None:
        self.scale = check_positive("scale", scale)
        self.smoothing = check_positive("smoothing", smoothing)
        self.noise_std = _check_noise_std(noise_std)

    def contributions(self, gradients: FloatArray) -> FloatArray:
        return smoothed_truncation(gradients, self.scale, self.smoothing)

    def record_bound(self, d: int) -> float:
        return self.scale * truncation_bound(self.smoothing)

    def sensitivity(self, d: int) -> float:
        return truncation_sensitivity(self.scale, d, smoothing=self.smoothing)

    def __repr__(self) -> str:
        return (
            f"LocalTruncation(scale={self.scale!r}, smoothing={self.smoothing!r}, "
            f"noise_std={self.noise_std!r})"
        )
