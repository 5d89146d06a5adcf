"""The noise calibration meets δ to 1e-9 relative, checked against mpmath at 60 digits.

``ratio_for_budget`` returns μ; the δ that μ really achieves at ε is computed here with
mpmath, independently of the float code, and must lie within a relative 1e-9 of the target
on both sides: never more than target·(1 + 1e-9) (the guarantee), and not below
target·(1 − 1e-9) (no needless noise). The grid spans every budget an agent accepts,
ε ∈ [1e-6, 50] and δ ∈ [1e-100, 1e-2] (docs/PRIVACY.md). At ε = 5.6e-6, δ = 1e-100 the
former solver (Brent on δ itself, absolute tolerance, δ evaluated with cancellation)
returned a μ that achieved 1.0000051 × δ.

``epsilon_for_ratio`` is checked the same way: the ε it reports may not understate the
true ε (the root of δ(ε; μ) = δ) by more than 1e-9 relative, nor overstate it.
"""

from __future__ import annotations

import math
import sys

import mpmath
import numpy as np
import pytest

from ldpem.common.core.accounting import (
    epsilon_for_ratio,
    gdp_delta,
    noise_std_for,
    ratio_for_budget,
)

#: Relative tolerance of the calibration, both ways.
TOLERANCE = 1e-9
#: Digits of the reference: δ(ε; μ) loses up to ~8 digits to cancellation at tiny μ.
DIGITS = 60

EPSILONS = sorted({*np.geomspace(1e-6, 50.0, 15).tolist(), 5.6e-6, 1e-6, 50.0})
DELTAS = [1e-100, 1e-50, 1e-20, 1e-10, 1e-6, 1e-2]
GRID = [(epsilon, delta) for epsilon in EPSILONS for delta in DELTAS]


def mp_delta(epsilon: float, mu: float | mpmath.mpf) -> mpmath.mpf:
    """δ(ε; μ) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) of μ-GDP, at ``DIGITS`` digits, for the
    exact binary values of ``epsilon`` and ``mu``."""
    with mpmath.workdps(DIGITS):
        e, m = mpmath.mpf(epsilon), mpmath.mpf(mu)
        return +(mpmath.ncdf(-e / m + m / 2) - mpmath.exp(e) * mpmath.ncdf(-e / m - m / 2))


def relative(achieved: mpmath.mpf, target: float) -> float:
    """achieved/target − 1, at ``DIGITS`` digits, as a float (inf for a target of 0)."""
    if target == 0.0:
        return math.inf
    with mpmath.workdps(DIGITS):
        return float(achieved / mpmath.mpf(target) - 1)


def test_the_grid_holds_the_ends_and_the_reported_point() -> None:
    assert EPSILONS[0] == 1e-6 and EPSILONS[-1] == 50.0 and 5.6e-6 in EPSILONS
    assert len(GRID) >= 90


@pytest.mark.parametrize("delta", DELTAS)
def test_calibrated_ratio_meets_delta_to_1e_9(delta: float) -> None:
    misses = []
    for epsilon in EPSILONS:
        mu = ratio_for_budget(epsilon, delta)
        error = relative(mp_delta(epsilon, mu), delta)
        if not -TOLERANCE <= error <= TOLERANCE:
            misses.append(f"epsilon={epsilon!r}: mu={mu!r} achieves delta·(1 {error:+.3e})")
    assert misses == [], "\n".join(misses)


@pytest.mark.parametrize("delta", [1e-100, 1e-20, 1e-6])
def test_noise_std_meets_delta_for_its_own_ratio(delta: float) -> None:
    # What protects a record is Δ/σ_r of the σ_r actually used, one more rounding away.
    sensitivity = 3.7
    for epsilon in EPSILONS:
        std = noise_std_for(epsilon=epsilon, delta=delta, sensitivity=sensitivity)
        with mpmath.workdps(DIGITS):
            ratio = mpmath.mpf(sensitivity) / mpmath.mpf(std)
        assert relative(mp_delta(epsilon, ratio), delta) <= TOLERANCE, epsilon


@pytest.mark.parametrize("delta", DELTAS)
def test_reported_epsilon_is_the_true_one_to_1e_9(delta: float) -> None:
    # δ(ε; μ) decreases in ε, so ε·(1 + 1e-9) ≥ the true ε iff δ there ≤ the target, and
    # ε·(1 − 1e-9) ≤ the true ε iff δ there ≥ the target. μ: calibrated ones and others.
    misses = []
    for epsilon in EPSILONS:
        calibrated = ratio_for_budget(epsilon, delta)
        for mu in (calibrated, 0.7 * calibrated, 1.3 * calibrated):
            reported = epsilon_for_ratio(mu, delta)
            if reported == 0.0:
                assert gdp_delta(0.0, mu) <= delta
                continue
            above = mp_delta(reported * (1 + TOLERANCE), mu)
            below = mp_delta(reported * (1 - TOLERANCE), mu)
            if not below >= delta >= above:
                misses.append(f"mu={mu!r}: epsilon {reported!r} off by more than 1e-9")
    assert misses == [], "\n".join(misses)


@pytest.mark.parametrize("delta", DELTAS)
def test_paper_calibration_is_conservative(delta: float) -> None:
    # zCDP: μ = √2·ε̃ makes ρ + 2√(ρ log 1/δ) = ε with ρ = μ²/2. The δ at which the float
    # μ meets ε by that conversion, exp(−(ε − ρ)²/(4ρ)), may exceed the target only by
    # rounding; and the conversion is loose, so the tight δ of that μ is below the target.
    for epsilon in EPSILONS:
        mu = ratio_for_budget(epsilon, delta, "paper")
        with mpmath.workdps(DIGITS):
            rho = mpmath.mpf(mu) ** 2 / 2
            assert rho < epsilon
            paper_delta = mpmath.exp(-((epsilon - rho) ** 2) / (4 * rho))
        assert relative(paper_delta, delta) <= TOLERANCE, epsilon
        assert relative(mp_delta(epsilon, mu), delta) <= 0.0, epsilon
        spent = epsilon_for_ratio(mu, delta, "paper")
        assert spent <= epsilon * (1 + TOLERANCE)


def test_delta_keeps_its_relative_precision_where_the_terms_cancel() -> None:
    # At μ = 2.7e-7 the two terms of δ agree to 7 digits; a direct difference of floats
    # keeps only ~9 of the 16 digits of each term.
    for epsilon, delta in [(5.6e-6, 1e-100), (1e-6, 1e-50), (2e-6, 1e-20), (0.3, 1e-6)]:
        mu = ratio_for_budget(epsilon, delta)
        for factor in (0.5, 0.9, 1.0, 1.1, 2.0):
            exact = mp_delta(epsilon, factor * mu)
            if exact < sys.float_info.min:
                continue  # 7e-373 at half the μ of δ = 1e-100: no float to compare
            error = relative(exact, gdp_delta(epsilon, factor * mu))
            assert abs(error) < 1e-12, (epsilon, delta, factor, error)


def test_large_ratios_stay_finite() -> None:
    # e^ε overflows a float past ε ≈ 709; δ must not.
    assert gdp_delta(800.0, 40.0) == pytest.approx(float(mp_delta(800.0, 40.0)), rel=1e-12)
    assert math.isfinite(epsilon_for_ratio(60.0, 1e-3))
