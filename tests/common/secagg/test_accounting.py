"""The privacy of the sum under Skellam noise, checked by brute force in one dimension
(common/core/secagg_accounting.py).

The accounting is a bound: Rényi DP of the Skellam mechanism (Agarwal, Kairouz & Liu
2021), converted to (ε, δ). Here it is compared with what the integer mechanism really
does: the exact Rényi divergence and the exact hockey-stick divergence δ(ε) of the two
shifted pmfs, summed over every integer that carries mass. The calibrated mechanism's
true δ must not exceed the target; with half the noise std it must.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import skellam

from ldpem.common.core.accounting import epsilon_for_ratio
from ldpem.common.core.secagg_accounting import (
    ORDERS,
    fallback_epsilon,
    hockey_stick_delta,
    rdp_to_epsilon,
    renyi_divergence,
    share_mean,
    share_noise_std,
    skellam_epsilon,
    skellam_mean_for,
    skellam_pmf,
    skellam_rdp,
)
from ldpem.common.core.secagg_quantize import IntegerSensitivity, grid_step, integer_sensitivity

#: The sensitivity of a holder's quantized sum in one dimension: B = 0.7 gives γ = 2^-10,
#: 2B/γ = 1433.6, Δ∞ = 1434 — the slack of the real mechanism (2B/γ in [2^10, 2^11)).
REAL = integer_sensitivity(0.7, grid_step(0.7), 1)


def test_the_real_sensitivity_has_the_slack() -> None:
    assert REAL.linf == 1434 and REAL.l1 == 1434 and REAL.l2_squared == 1434**2


def test_the_pmf_agrees_with_scipy_and_sums_to_one() -> None:
    for mean in (0.2, 3.0, 700.0, 2e7):
        reach = int(12 * math.sqrt(2 * mean)) + 20
        k = np.arange(-reach, reach + 1)
        ours = skellam_pmf(k, mean)
        assert math.isclose(float(ours.sum()), 1.0, rel_tol=1e-12)
        # scipy's (non-central chi-square) is slow: a few hundred points across the range.
        some = k[:: max(1, k.size // 400)]
        theirs = skellam.pmf(some, mean, mean)
        shown = theirs > 1e-300
        np.testing.assert_allclose(skellam_pmf(some, mean)[shown], theirs[shown], rtol=1e-10)


@pytest.mark.parametrize("mean", [2.0, 10.0, 100.0, 1e4])
@pytest.mark.parametrize("shift", [1, 3, 10, 50])
@pytest.mark.parametrize("alpha", [2, 3, 8, 32])
def test_the_rdp_bound_holds_against_the_exact_renyi_divergence(
    mean: float, shift: int, alpha: int
) -> None:
    exact = renyi_divergence(mean, shift, alpha)
    bound = skellam_rdp(alpha, mean=mean, l1=shift, l2_squared=shift**2)
    assert exact <= bound * (1.0 + 1e-9), (exact, bound)


def test_the_rdp_bound_is_close_to_exact_for_large_means() -> None:
    """With λ ≫ Δ the mechanism is nearly Gaussian of variance 2λ and the bound nearly
    exact: the accounting wastes no noise there."""
    mean, shift, alpha = 1e6, REAL.linf, 30
    exact = renyi_divergence(mean, shift, alpha)
    bound = skellam_rdp(alpha, mean=mean, l1=shift, l2_squared=shift**2)
    assert exact <= bound <= exact * 1.01


@pytest.mark.parametrize("sigma", [0.3, 1.0, 3.0, 10.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-6, 1e-10])
def test_the_conversion_is_valid_for_the_gaussian(sigma: float, delta: float) -> None:
    """The RDP → (ε, δ) conversion against the Gaussian mechanism, whose exact ε (μ-GDP,
    μ = 1/σ) is known: at its exact RDP curve α/(2σ²) the conversion never claims less."""
    converted = min(rdp_to_epsilon(alpha / (2 * sigma**2), alpha, delta) for alpha in ORDERS)
    exact = epsilon_for_ratio(1.0 / sigma, delta, "exact")
    assert converted >= exact
    assert converted <= 1.5 * exact + 0.05  # and it is a usable bound


#: (ε, δ, integer shift): the real slack (1434) and small shifts, where the pmf is far
#: from Gaussian at the calibrated λ and the discrete terms of the bound matter.
CASES = [
    (epsilon, delta, shift)
    for epsilon in (0.5, 1.0, 2.0)
    for delta in (1e-5, 1e-7)
    for shift in (1434, 1, 4)
]


@pytest.mark.parametrize(("epsilon", "delta", "shift"), CASES)
def test_the_calibrated_mechanism_meets_its_delta_and_half_the_noise_does_not(
    epsilon: float, delta: float, shift: int
) -> None:
    sensitivity = IntegerSensitivity(linf=shift, d=1)
    mean = skellam_mean_for(epsilon, delta, sensitivity)
    assert skellam_epsilon(mean, delta=delta, sensitivity=sensitivity) <= epsilon
    true_delta = hockey_stick_delta(mean, shift, epsilon)
    assert true_delta <= delta, (true_delta, delta)
    # Half the noise std is a quarter of the variance 2λ: far above the target.
    assert hockey_stick_delta(mean / 4.0, shift, epsilon) > delta
    # The calibration is tight for its bound: 0.1% less noise misses the target.
    assert skellam_epsilon(mean * 0.998, delta=delta, sensitivity=sensitivity) > epsilon


def test_the_hockey_stick_agrees_with_an_independent_summation() -> None:
    mean, shift, epsilon = 40.0, 3, 0.7
    k = np.arange(-400, 401)
    first, second = skellam.pmf(k - shift, mean, mean), skellam.pmf(k, mean, mean)
    reference = float(np.sum(np.maximum(0.0, first - math.exp(epsilon) * second)))
    assert math.isclose(hockey_stick_delta(mean, shift, epsilon), reference, rel_tol=1e-9)
    # Symmetric: either order of the pair gives the same δ.
    other = float(np.sum(np.maximum(0.0, second - math.exp(epsilon) * first)))
    assert math.isclose(other, reference, rel_tol=1e-9)


@pytest.mark.parametrize("d", [1, 10, 50])
def test_the_calibration_in_d_dimensions(d: int) -> None:
    sensitivity = integer_sensitivity(0.7, grid_step(0.7), d)
    mean = skellam_mean_for(1.0, 1e-6, sensitivity)
    assert skellam_epsilon(mean, delta=1e-6, sensitivity=sensitivity) <= 1.0
    # The variance 2λ scales with Δ₂² = d·Δ∞² (the discrete terms are negligible here).
    one = skellam_mean_for(1.0, 1e-6, integer_sensitivity(0.7, grid_step(0.7), 1))
    assert mean == pytest.approx(d * one, rel=1e-6)


def test_composition_costs_more() -> None:
    once = skellam_mean_for(1.0, 1e-6, REAL)
    assert skellam_mean_for(1.0, 1e-6, REAL, participations=10) > 5 * once
    assert skellam_epsilon(once, delta=1e-6, sensitivity=REAL, participations=10) > 1.0


@pytest.mark.parametrize("t_min", [1, 2, 3, 7, 500, 1000])
def test_t_min_shares_add_up_to_at_least_the_calibrated_mean(t_min: int) -> None:
    total = skellam_mean_for(1.0, 1e-6, REAL)
    share = share_mean(total, t_min)
    assert Fraction(share) * t_min >= Fraction(total)
    assert share <= total / t_min * (1.0 + 1e-12)
    grid = grid_step(0.7)
    std = share_noise_std(epsilon=1.0, delta=1e-6, sensitivity=REAL, grid=grid, t_min=t_min)
    assert (std / grid) ** 2 / 2.0 >= share  # what the mechanism derives back from σ_s


def test_the_fallback_is_the_bound_of_one_share() -> None:
    total = skellam_mean_for(1.0, 1e-6, REAL)
    # One honest holder's share is the whole noise: the fallback is the run's ε.
    assert fallback_epsilon(share_mean(total, 1), delta=1e-6, sensitivity=REAL) <= 1.0
    previous = 1.0
    for t_min in (2, 10, 100):
        fallback = fallback_epsilon(share_mean(total, t_min), delta=1e-6, sensitivity=REAL)
        assert fallback > previous  # less noise in one share, weaker alone
        previous = fallback
    # About √t_min times the ε for large ε (the Gaussian part dominates): 100 → ~10× or more.
    assert previous > 8.0


def test_the_fallback_checked_by_brute_force() -> None:
    """The fallback ε of one share, at its δ, is not an understatement either."""
    total = skellam_mean_for(1.0, 1e-5, REAL)
    share = share_mean(total, 4)
    fallback = fallback_epsilon(share, delta=1e-5, sensitivity=REAL)
    assert hockey_stick_delta(share, REAL.linf, fallback) <= 1e-5
    assert hockey_stick_delta(share, REAL.linf, fallback / 2) > 1e-5


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: skellam_rdp(1.0, mean=1.0, l1=1.0, l2_squared=1.0), "alpha must be > 1"),
        (lambda: skellam_mean_for(0.0, 1e-6, REAL), "epsilon must be a finite number > 0"),
        (lambda: skellam_mean_for(1.0, 1.5, REAL), "delta must be in \\(0, 1\\)"),
        (lambda: share_mean(10.0, 0), "t_min must be an integer >= 1"),
        (lambda: hockey_stick_delta(1.0, -1, 1.0), "shift must be an integer >= 0"),
    ],
)
def test_bad_values_are_named(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()  # type: ignore[operator]
