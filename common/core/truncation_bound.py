"""The certified bound sup_x |T(x)|/s of the smoothed truncation, as a function of β_s.

T(x) = s · E φ(a + bZ) with a = x/s, b = |a|/√β_s, Z ~ N(0, 1) (docs/PRIVACY.md). The
crude bound |φ| ≤ 2√2/3 gives |T| ≤ s·2√2/3, but the smoothing never lets T reach it:

    sup_a |E φ(a + |a| Z/√β_s)| = (2√2/3) · erf(√(β_s/2)) = (2√2/3) · (1 − 2Φ(−√β_s))

(0.857 of 2√2/3 at β_s = √(log 100), d = 10, ζ = 0.1), and this supremum is approached as
|a| → ∞ but never reached. Every sensitivity, noise calibration and range check uses it.

Certificate (what is proved; the tests check each ingredient numerically, with mpmath):

1. Reduction. φ is odd and Z symmetric, so f(a) = E φ(a + |a|Z/√β_s) is odd; take a > 0.
   Put c = √β_s and substitute Z = t − c: then a + aZ/c = a·t/c, so
       f(a) = ∫_ℝ φ(a t/c) ϕ(t − c) dt,  ϕ the standard normal density.
2. Folding the negative half-line onto the positive one (φ odd):
       f(a) = ∫_0^∞ φ(a t/c) · w(t) dt,   w(t) = ϕ(t − c) − ϕ(t + c).
   For t ≥ 0, |t − c| ≤ t + c, so w(t) ≥ 0.
3. On [0, ∞), 0 ≤ φ(u) ≤ 2√2/3 (u − u³/6 ≥ 0 for u² ≤ 6, and φ = 2√2/3 beyond √2). Hence
       0 ≤ f(a) ≤ (2√2/3) ∫_0^∞ w(t) dt = (2√2/3) (Φ(c) − Φ(−c)) = (2√2/3) erf(c/√2).
4. Tightness: φ(a t/c) → 2√2/3 for every t > 0 as a → ∞ (dominated by 2√2/3·w), so the
   bound is the supremum. Also φ is non-decreasing on [0, ∞), so f is non-decreasing in a:
   the supremum is the limit a → ∞, with no interior maximum to miss.

Error terms. The bound is exact; the only error is floating point. ``truncation_bound``
evaluates (2√2/3)·erf(√(β_s/2)) (libm's erf: error ≤ a few ulp), multiplies by
1 + 2⁻⁴⁰ (≈ 1e-12, far above the rounding of the product) and caps at 2√2/3, so the float
it returns is ≥ the true supremum. ``smoothed_truncation`` clips its output to s times
this value; mathematically a no-op (step 3), the clip makes the bound hold for the
computed T under any rounding, which is what the privacy proof needs.
"""

from __future__ import annotations

import math
from functools import lru_cache

from ldpem.common.core._validation import check_positive

__all__ = ["PHI_SUP", "SAFETY", "truncation_bound"]

#: sup |φ| = 2√2/3, the crude bound (β_s → ∞).
PHI_SUP = 2.0 * math.sqrt(2.0) / 3.0
#: Relative margin that makes the float result an upper bound despite rounding.
SAFETY = 2.0**-40


def truncation_bound(smoothing: float) -> float:
    """sup_x |T(x)|/s for smoothing precision β_s > 0: (2√2/3)·erf(√(β_s/2)), rounded up.

    Raises ValueError unless ``smoothing`` is a finite number > 0.
    """
    return _bound(check_positive("smoothing", smoothing))


@lru_cache(maxsize=256)
def _bound(smoothing: float) -> float:
    exact = PHI_SUP * math.erf(math.sqrt(0.5 * smoothing))
    return min(PHI_SUP, exact * (1.0 + SAFETY))
