"""The certified bound of the smoothed truncation: each step of its proof, checked."""

from __future__ import annotations

import itertools
import math

import mpmath
import numpy as np
import pytest

from ldpem.common.core.calibration import smoothing_precision
from ldpem.common.core.truncation import catoni_phi, smoothed_truncation
from ldpem.common.core.truncation_bound import PHI_SUP, SAFETY, truncation_bound

mpmath.mp.dps = 30
BETAS = [0.05, 0.5, smoothing_precision(1), smoothing_precision(10), smoothing_precision(1000), 8.0]


def mp_phi(u: mpmath.mpf) -> mpmath.mpf:
    r2 = mpmath.sqrt(2)
    if u > r2:
        return 2 * r2 / 3
    if u < -r2:
        return -2 * r2 / 3
    return u - u**3 / 6


def mp_expected_phi(a: float, beta_s: float) -> mpmath.mpf:
    """E φ(a + |a|Z/√β_s) by quadrature of the definition, split at φ's kinks."""
    a, c = mpmath.mpf(a), mpmath.sqrt(mpmath.mpf(beta_s))

    def integrand(z: mpmath.mpf) -> mpmath.mpf:
        return mp_phi(a + abs(a) * z / c) * mpmath.npdf(z)

    # The kinks of φ(a(1 + z/c)) at u = ±√2 and u = 0 (z = −c); infinite ends.
    kinks = sorted({float(c * (s / a - 1)) for s in (-mpmath.sqrt(2), mpmath.sqrt(2))} | {-c})
    return mpmath.quad(integrand, [-mpmath.inf, *kinks, mpmath.inf])


def mp_supremum(beta_s: float) -> mpmath.mpf:
    """(2√2/3)·(Φ(√β_s) − Φ(−√β_s)), the claimed supremum, in 30 digits."""
    c = mpmath.sqrt(mpmath.mpf(beta_s))
    return 2 * mpmath.sqrt(2) / 3 * (mpmath.ncdf(c) - mpmath.ncdf(-c))


@pytest.mark.parametrize("beta_s", BETAS)
def test_bound_is_the_rounded_up_supremum(beta_s: float) -> None:
    exact = mp_supremum(beta_s)
    bound = truncation_bound(beta_s)
    assert bound >= exact  # an upper bound in spite of rounding
    assert bound - exact <= 4 * SAFETY * exact  # and no looser than its stated margin
    assert bound < PHI_SUP


@pytest.mark.parametrize("beta_s", BETAS)
def test_step1_2_folded_integral_equals_the_definition(beta_s: float) -> None:
    """f(a) = ∫_0^∞ φ(a t/c) (ϕ(t−c) − ϕ(t+c)) dt, c = √β_s, against the definition."""
    c = mpmath.sqrt(mpmath.mpf(beta_s))
    for a in (0.3, 1.7, 12.0):

        def folded(t: mpmath.mpf, a: float = a) -> mpmath.mpf:
            return mp_phi(a * t / c) * (mpmath.npdf(t - c) - mpmath.npdf(t + c))

        kink = mpmath.sqrt(2) * c / a
        value = mpmath.quad(folded, [0, kink, mpmath.inf])
        assert abs(value - mp_expected_phi(a, beta_s)) < 1e-20


@pytest.mark.parametrize("beta_s", BETAS)
def test_step2_weight_is_non_negative(beta_s: float) -> None:
    c = math.sqrt(beta_s)
    t = np.linspace(0.0, 40.0, 100_001)
    weight = np.exp(-0.5 * (t - c) ** 2) - np.exp(-0.5 * (t + c) ** 2)
    assert np.all(weight >= 0.0)


def test_step3_phi_between_zero_and_its_sup_on_the_half_line() -> None:
    u = np.concatenate([np.linspace(0.0, 3.0, 300_001), np.logspace(0, 100, 1000)])
    phi = catoni_phi(u)
    assert np.all(phi >= 0.0)
    assert np.all(phi <= PHI_SUP)
    assert np.all(np.diff(phi[:300_001]) >= 0.0)  # step 4: non-decreasing


@pytest.mark.parametrize("beta_s", BETAS)
def test_mpmath_values_stay_below_and_approach_the_bound(beta_s: float) -> None:
    exact = mp_supremum(beta_s)
    values = [mp_expected_phi(a, beta_s) for a in (0.5, 1.0, 1.4, 2.0, 5.0, 1e2, 1e4, 1e6)]
    assert all(0 <= v <= exact for v in values)
    assert all(x <= y for x, y in itertools.pairwise(values))  # monotone in a
    # The gap closes like 1/a² (the derivation in truncation_bound's docstring).
    assert exact - values[-1] < 1e-9


@pytest.mark.parametrize("beta_s", BETAS)
def test_implementation_never_exceeds_the_bound_and_gets_close(beta_s: float) -> None:
    s = 1.7
    x = np.concatenate([np.logspace(-12, 300, 20_000), np.linspace(0.0, 60.0, 20_001)])
    out = smoothed_truncation(np.concatenate([x, -x]), s, beta_s)
    bound = s * truncation_bound(beta_s)
    assert np.max(np.abs(out)) <= bound
    assert np.max(out) >= bound * (1 - 1e-9)


def test_bound_at_the_edges() -> None:
    assert truncation_bound(1e300) == PHI_SUP  # capped at the crude bound
    tiny = truncation_bound(1e-300)
    assert 0.0 < tiny < 1e-149  # ~ (2√2/3)·√(2β/π)
    assert truncation_bound(2.5) == truncation_bound(2.5)  # cached, deterministic
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="smoothing must be a finite number > 0"):
            truncation_bound(bad)


def test_default_setting_is_about_86_percent_of_the_crude_bound() -> None:
    ratio = truncation_bound(smoothing_precision(10)) / PHI_SUP
    assert ratio == pytest.approx(math.erf(math.sqrt(smoothing_precision(10) / 2)), rel=1e-11)
    assert 0.85 < ratio < 0.86
