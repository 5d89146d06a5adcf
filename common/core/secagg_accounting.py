"""The privacy of the aggregated sum under Skellam noise (docs/SECAGG.md, "Accounting of
the sum" and "Fallback").

What is released in a round is the SUM Y = Σ_k (Q_k + Z_k) of the holders' quantized sums
Q_k (``ldpem.common.core.secagg_quantize``) and noise shares Z_k ~ Sk(λ/t_min) per coordinate,
Sk(λ) = Poisson(λ) − Poisson(λ). A record lives in one holder's Q_k; replacing it moves Y
by an integer vector v with ‖v‖∞ ≤ Δ∞, ‖v‖₂² ≤ d·Δ∞², ‖v‖₁ ≤ d·Δ∞
(``quantize.integer_sensitivity``: the quantization slack is in Δ∞). With at least t_min
honest holders in the sum, their shares add up to exactly Sk(λ') with λ' ≥ λ per
coordinate; the others' shares and sums are known to an adversary at worst, which is
post-processing. So the sum is as private as Q + Sk(λ) on a sensitivity-(Δ₁, Δ₂) query:

* **Rényi DP** (Agarwal, Kairouz & Liu 2021, the Skellam mechanism): for every order α > 1,
      τ(α) ≤ α Δ₂²/(4λ) + min( (2α Δ₂² + 6 Δ₁)/(16 λ²), 3 Δ₁/(4λ) ).
  The paper's second term has (2α − 1); we use 2α, which only makes the bound larger.
  In one dimension the bound is checked against the exact Rényi divergence of the two
  shifted pmfs (tests/common/secagg/test_accounting.py); in d dimensions the divergence
  of independent coordinates is the sum of theirs, and the sum of the per-coordinate
  bounds is at most the bound above with Δ₂² = Σ v_i², Δ₁ = Σ |v_i|.
* **Composition**: k participations of a record add their τ(α).
* **Conversion** to (ε, δ) (Canonne, Kamath & Steinke 2020, Prop. 12; Balle et al. 2020):
      ε = τ(α) + log(1 − 1/α) − (log δ + log α)/(α − 1),
  minimised over the orders ``ORDERS`` (integers 2..256, then integers ~5% apart to 2^40).
* **Calibration** (``skellam_mean_for``): the least λ, found by bisection on log λ and
  returned from the private side of the bracket, whose ε at δ is at most the target; so
  the calibrated mechanism never exceeds its δ (checked by brute force: the exact
  hockey-stick divergence δ(ε) of the one-dimensional integer mechanism,
  ``hockey_stick_delta``, is below the target, and above it with half the noise std).
* **Fallback** (``fallback_epsilon``): when every other holder colludes with the
  coordinator, a holder's own report Q_k + Sk(λ/t_min) is all that protects its records:
  the same bound with λ/t_min.

The ``accounting`` choice of a run ("exact" Gaussian DP, or "paper" zCDP) is for Gaussian
noise; Skellam noise is always accounted as here.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import ive

from ldpem.common.core._validation import check_count, check_open_unit, check_positive
from ldpem.common.core.secagg_quantize import IntegerSensitivity

__all__ = [
    "ORDERS",
    "fallback_epsilon",
    "hockey_stick_delta",
    "rdp_to_epsilon",
    "renyi_divergence",
    "share_mean",
    "share_noise_std",
    "skellam_epsilon",
    "skellam_mean_for",
    "skellam_pmf",
    "skellam_rdp",
]

FloatArray = NDArray[np.float64]

#: Rényi orders tried: every integer to 256 (ε ≳ 0.1 at usual δ), then integers about 5%
#: apart up to 2^40 for the small ε whose best order is large (α ≈ 2 log(1/δ)/ε).
ORDERS: tuple[int, ...] = tuple(
    sorted({*range(2, 257), *(math.ceil(256 * 1.05**k) for k in range(1, 455))})
)


def skellam_rdp(alpha: float, *, mean: float, l1: float, l2_squared: float) -> float:
    """τ(α) of Q + Sk(λ) per coordinate, λ = ``mean``, for a query of L1 sensitivity
    ``l1`` = Δ₁ and squared L2 sensitivity ``l2_squared`` = Δ₂² (module doc)."""
    if not alpha > 1.0:
        raise ValueError(f"alpha must be > 1, got {alpha!r}")
    mean = check_positive("mean", mean)
    first = alpha * l2_squared / (4.0 * mean)
    quadratic = (2.0 * alpha * l2_squared + 6.0 * l1) / (16.0 * mean * mean)
    linear = 3.0 * l1 / (4.0 * mean)
    return first + min(quadratic, linear)


def rdp_to_epsilon(rdp: float, alpha: float, delta: float) -> float:
    """ε at ``delta`` of an (α, τ)-RDP mechanism, τ = ``rdp`` (Canonne, Kamath & Steinke
    2020, Prop. 12): τ + log(1 − 1/α) − (log δ + log α)/(α − 1), at least 0."""
    delta = check_open_unit("delta", delta)
    value = rdp + math.log1p(-1.0 / alpha) - (math.log(delta) + math.log(alpha)) / (alpha - 1.0)
    return max(0.0, value)


def skellam_epsilon(
    mean: float, *, delta: float, sensitivity: IntegerSensitivity, participations: int = 1
) -> float:
    """ε at ``delta`` of ``participations`` releases of Q + Sk(λ), λ = ``mean``, with
    the integer ``sensitivity`` of Q: the best of ``ORDERS``."""
    participations = check_count("participations", participations)
    l1, l2_squared = float(sensitivity.l1), float(sensitivity.l2_squared)
    return min(
        rdp_to_epsilon(
            participations * skellam_rdp(alpha, mean=mean, l1=l1, l2_squared=l2_squared),
            alpha,
            delta,
        )
        for alpha in ORDERS
    )


@lru_cache(maxsize=1024)
def skellam_mean_for(
    epsilon: float, delta: float, sensitivity: IntegerSensitivity, participations: int = 1
) -> float:
    """The least λ (to a relative 1e-12, rounded up) such that ``participations``
    releases of Q + Sk(λ) are (``epsilon``, ``delta``)-DP: ε(λ) decreases in λ; bracketed
    by doubling, then bisected on log λ, keeping the private end."""
    epsilon = check_positive("epsilon", epsilon)
    delta = check_open_unit("delta", delta)

    def private(mean: float) -> bool:
        found = skellam_epsilon(
            mean, delta=delta, sensitivity=sensitivity, participations=participations
        )
        return found <= epsilon

    high = 1.0
    while not private(high):
        high *= 2.0
        if high > 1e300:
            raise ArithmeticError(f"no Skellam mean reaches epsilon={epsilon!r}")
    low = high / 2.0
    while private(low) and low > 1e-300:
        high, low = low, low / 2.0
    while high - low > 1e-12 * high:
        middle = math.sqrt(low * high)
        if not low < middle < high:
            break
        if private(middle):
            high = middle
        else:
            low = middle
    return high


def share_mean(total: float, t_min: int) -> float:
    """λ_s of one holder's share such that ``t_min`` shares add up to at least Sk(total):
    total/t_min, stepped up until t_min·λ_s ≥ total in exact arithmetic."""
    total = check_positive("total", total)
    t_min = check_count("t_min", t_min)
    share = total / t_min
    while Fraction(share) * t_min < Fraction(total):
        share = math.nextafter(share, math.inf)
    return share


@lru_cache(maxsize=1024)
def share_noise_std(
    *,
    epsilon: float,
    delta: float,
    sensitivity: IntegerSensitivity,
    grid: float,
    t_min: int,
    participations: int = 1,
) -> float:
    """The std γ·√(2λ_s) of one holder's share, in the contributions' units, so that any
    ``t_min`` shares make the sum (``epsilon``, ``delta``)-DP over ``participations``
    rounds. Rounded up so that the share mean a mechanism derives back from it,
    (σ/γ)²/2 in float64, is at least λ_s."""
    grid = check_positive("grid", grid)
    share = share_mean(skellam_mean_for(epsilon, delta, sensitivity, participations), t_min)
    std = grid * math.sqrt(2.0 * share)
    while (std / grid) ** 2 / 2.0 < share:
        std = math.nextafter(std, math.inf)
    return std


def fallback_epsilon(
    share: float, *, delta: float, sensitivity: IntegerSensitivity, participations: int = 1
) -> float:
    """ε at ``delta`` that a holder's own report, Q_k + Sk(λ_s), λ_s = ``share``, gives
    its records when every other holder colludes with the coordinator (module doc)."""
    return skellam_epsilon(
        share, delta=delta, sensitivity=sensitivity, participations=participations
    )


def skellam_pmf(values: ArrayLike, mean: float) -> FloatArray:
    """P(Z = k) for Z ~ Sk(λ), λ = ``mean``: e^{−2λ} I_|k|(2λ), the exponentially scaled
    Bessel function ``scipy.special.ive`` (no overflow for large λ).

    Parameters
    ----------
    values : array-like of int, shape (n,)
        k.
    mean : float
        λ > 0.

    Returns
    -------
    pmf : array of shape (n,)
    """
    mean = check_positive("mean", mean)
    k = np.abs(np.asarray(values, dtype=np.float64))
    pmf: FloatArray = ive(k, 2.0 * mean)
    return pmf


def _window(mean: float, shift: int) -> NDArray[np.int64]:
    """Integers holding all but ~e^-800 of the mass of Sk(λ) and of Sk(λ) + shift."""
    reach = shift + math.ceil(40.0 * math.sqrt(2.0 * mean)) + 40
    return np.arange(-reach, reach + shift + 1, dtype=np.int64)


def hockey_stick_delta(mean: float, shift: int, epsilon: float) -> float:
    """The exact δ(ε) = Σ_k max(0, P(k − shift) − e^ε P(k)) of the one-dimensional
    mechanism q + Sk(λ) on two inputs ``shift`` apart (P the Skellam pmf; symmetric, so
    either order gives the same), by summation over every integer carrying mass.

    Parameters
    ----------
    mean : float
        λ.
    shift : int
        |q − q'| ≥ 0.
    epsilon : float
        ε ≥ 0.

    Returns
    -------
    delta : float
    """
    shift = check_count("shift", shift, minimum=0)
    if not (math.isfinite(epsilon) and epsilon >= 0.0):
        raise ValueError(f"epsilon must be a finite number >= 0, got {epsilon!r}")
    k = _window(mean, shift)
    first = skellam_pmf(k - shift, mean)
    second = skellam_pmf(k, mean)
    return float(np.sum(np.maximum(0.0, first - math.exp(epsilon) * second)))


def renyi_divergence(mean: float, shift: int, alpha: float) -> float:
    """The exact D_α(Sk(λ) + shift ‖ Sk(λ)) = log Σ_k P(k − shift)^α P(k)^(1−α) / (α − 1),
    by summation in log space over the integers where both pmfs are positive floats."""
    shift = check_count("shift", shift, minimum=0)
    if not alpha > 1.0:
        raise ValueError(f"alpha must be > 1, got {alpha!r}")
    k = _window(mean, shift)
    first = skellam_pmf(k - shift, mean)
    second = skellam_pmf(k, mean)
    both = (first > 0.0) & (second > 0.0)
    terms = alpha * np.log(first[both]) + (1.0 - alpha) * np.log(second[both])
    peak = float(np.max(terms))
    return (peak + math.log(float(np.sum(np.exp(terms - peak))))) / (alpha - 1.0)
