"""The clipped baseline in the local model (Algorithm 1): clip each gradient to L2 norm C,
Gaussian noise on each record's report."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from ldpem.common.core._validation import check_positive
from ldpem.common.mechanisms.base import (
    FloatArray,
    Mechanism,
    Needs,
    NoiseSite,
    _check_noise_std,
)
from ldpem.common.mechanisms.registry import register_mechanism

__all__ = ["LocalClipped", "clip_rows"]


def clip_rows(gradients: FloatArray, clip: float) -> FloatArray:
    """Each row scaled to L2 norm at most ``clip``: g / max(1, ‖g‖/C) (Algorithm 1, line 3).

    Norms are taken of rows divided by their largest |entry|, so rows near the float range
    (where ‖g‖² overflows) keep their direction instead of collapsing to zero.

    Non-finite entries give a bounded row too (a refusal would leak, see
    ``smoothed_truncation``): NaN counts as 0, and a row with infinite entries becomes
    their direction (±1 on each, 0 elsewhere) at norm C, the limit of its finite
    neighbours.

    Parameters
    ----------
    gradients : array of shape (n, d)
        Per-record gradients; may hold NaN and ±inf.
    clip : float
        C > 0, the largest L2 norm of a row.

    Returns
    -------
    clipped : array of shape (n, d)
        Finite rows of L2 norm ≤ C.
    """
    gradients = np.where(np.isnan(gradients), 0.0, gradients)
    infinite = np.isinf(gradients)
    has_infinite: NDArray[np.bool_] = np.any(infinite, axis=1)
    gradients = np.where(
        has_infinite[:, None], np.where(infinite, np.sign(gradients), 0.0), gradients
    )
    peak = np.max(np.abs(gradients), axis=1)
    peak[peak == 0.0] = 1.0
    scaled = gradients / peak[:, None]
    scaled_norm = np.sqrt(np.einsum("ij,ij->i", scaled, scaled))
    with np.errstate(over="ignore"):  # ‖g‖ = inf is fine: min(inf, C) = C
        norm = np.where(has_infinite, math.inf, peak * scaled_norm)
    length = np.minimum(norm, clip)
    safe = np.where(scaled_norm > 0.0, scaled_norm, 1.0)
    shrunk = scaled * (length / safe)[:, None]
    clipped: FloatArray = np.where((norm <= clip)[:, None], gradients, shrunk)
    return clipped


@register_mechanism
@dataclass(frozen=True, kw_only=True)
class LocalClipped(Mechanism):
    """Clipped baseline in the local model (Algorithm 1): clip each g_i to L2 norm C, add
    N(0, σ_r² I_d) per record; sensitivity 2C.

    Parameters
    ----------
    clip : float
        C > 0, the largest L2 norm of a record's contribution.
    noise_std : float
        σ_r ≥ 0, the per-coordinate std of the Gaussian noise on each report.
    """

    name = "local-clip"
    label = "clipped local DP"
    noise_site: ClassVar[NoiseSite] = "record"
    needs: ClassVar[Needs] = "clip"

    clip: float
    noise_std: float

    def __post_init__(self) -> None:
        # Validated once, here; frozen afterwards.
        object.__setattr__(self, "clip", check_positive("clip", self.clip))
        object.__setattr__(self, "noise_std", _check_noise_std(self.noise_std))

    def contributions(self, gradients: FloatArray) -> FloatArray:
        return clip_rows(gradients, self.clip)

    def record_bound(self, d: int) -> float:
        return self.clip

    def sensitivity(self, d: int) -> float:
        return 2.0 * self.clip
