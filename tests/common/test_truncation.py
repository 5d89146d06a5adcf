"""The smoothed truncation T(x): exactness against quadrature, and the privacy bound."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate
from scipy.special import ndtr

from ldpem.common.core.calibration import smoothing_precision
from ldpem.common.core.truncation import (
    TRUNCATION_BOUND,
    _expected_phi,
    _far_table,
    _table,
    _tables,
    catoni_phi,
    smoothed_truncation,
)

SQRT2 = math.sqrt(2.0)


@pytest.fixture(autouse=True)
def _quiet_reference_quadrature() -> Iterator[None]:
    # scipy's quad warns about roundoff at its 1e-15 target; the reference is still exact
    # to far better than the 1e-12 asserted.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", integrate.IntegrationWarning)
        yield


def expected_phi_scipy(a: float, b: float) -> float:
    """E φ(a + bZ) by adaptive quadrature over the polynomial piece plus the two tails."""
    lo, hi = (-SQRT2 - a) / b, (SQRT2 - a) / b
    # Beyond |z| = 40 the Gaussian density is below 1e-300: clamp so quad sees the peak.
    inner, _ = integrate.quad(
        lambda z: float(catoni_phi(a + b * z)) * math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi),
        max(lo, -40.0),
        min(hi, 40.0),
        epsabs=1e-15,
        epsrel=1e-14,
        limit=200,
    )
    return float(inner) + TRUNCATION_BOUND * (float(ndtr(-hi)) - float(ndtr(lo)))


def expected_phi_mpmath(a: float, b: float) -> float:
    """E φ(a + bZ) at 40 digits, integrating over u with the density of U = a + bZ."""
    mpmath.mp.dps = 40
    a_, b_ = mpmath.mpf(a), mpmath.mpf(b)
    r2 = mpmath.sqrt(2)

    def integrand(u: mpmath.mpf) -> mpmath.mpf:
        return (u - u**3 / 6) * mpmath.npdf(u, a_, b_)

    points = [-r2, r2]
    if -r2 < a_ < r2:
        points = [-r2, *[a_ + k * b_ for k in range(-8, 9) if -r2 < a_ + k * b_ < r2], r2]
        points = sorted(set(points))
    inner = mpmath.quad(integrand, points)
    outer = (2 * r2 / 3) * (mpmath.ncdf(-r2, -a_, b_) - mpmath.ncdf(-r2, a_, b_))
    return float(inner + outer)


def paper_closed_form(a: float, b: float) -> float:
    """Eq. 13 with Ĉ = T1 + … + T5 exactly as printed in the paper."""
    v_minus, v_plus = (SQRT2 - a) / b, (SQRT2 + a) / b
    f_minus, f_plus = float(ndtr(-v_minus)), float(ndtr(-v_plus))
    e_minus, e_plus = math.exp(-(v_minus**2) / 2), math.exp(-(v_plus**2) / 2)
    root = math.sqrt(2 * math.pi)
    t1 = TRUNCATION_BOUND * (f_minus - f_plus)
    t2 = -(a - a**3 / 6) * (f_minus + f_plus)
    t3 = b / root * (1 - a**2 / 2) * (e_plus - e_minus)
    t4 = a * b**2 / 2 * (f_plus + f_minus + (v_plus * e_plus + v_minus * e_minus) / root)
    t5 = b**3 / (6 * root) * ((2 + v_minus**2) * e_minus - (2 + v_plus**2) * e_plus)
    return a * (1 - b**2 / 2) - a**3 / 6 + t1 + t2 + t3 + t4 + t5


def truncation_at(a: float, b: float, s: float = 1.0) -> float:
    """T(x)/s for x = a·s with β_s chosen so that b = |a|/√β_s."""
    beta_s = (a / b) ** 2
    return float(smoothed_truncation(np.array([a * s]), s, beta_s)[0]) / s


# A grid over the well-conditioned region (|a| ≤ 3, 0 < b ≤ 3), b → 0 included.
GRID = [
    (a, b)
    for a in (-2.9, -1.5, -SQRT2, -0.7, -0.05, 0.001, 0.3, 1.0, 1.41, 1.42, 2.2, 3.0)
    for b in (1e-6, 1e-3, 0.05, 0.2, 0.7, 1.0, 2.0, 3.0)
]


@pytest.mark.parametrize(("a", "b"), GRID)
def test_matches_scipy_quadrature_where_closed_form_is_well_conditioned(a: float, b: float) -> None:
    assert truncation_at(a, b) == pytest.approx(expected_phi_scipy(a, b), abs=1e-12)


@pytest.mark.parametrize(("a", "b"), GRID)
def test_agrees_with_the_papers_closed_form_eq13(a: float, b: float) -> None:
    assert truncation_at(a, b) == pytest.approx(paper_closed_form(a, b), abs=1e-12)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (3.01, 0.01),
        (3.01, 0.5),
        (3.5, 2.0),
        (-4.0, 0.3),
        (10.0, 7.0),
        (50.0, 35.0),
        (1e3, 700.0),
        (1e6, 1e6),
        (2.0, 3.5),
        (0.5, 40.0),
        (-1e-3, 0.5),
    ],
)
def test_matches_high_precision_quadrature_outside_closed_form_region(a: float, b: float) -> None:
    assert truncation_at(a, b) == pytest.approx(expected_phi_mpmath(a, b), abs=1e-12)


def test_paper_closed_form_is_unusable_for_large_inputs() -> None:
    # The reason the implementation does not use the closed form everywhere (docs/MATH.md §2).
    b = 1e6 / math.sqrt(2.146)
    assert abs(paper_closed_form(1e6, b)) > 1.0
    assert abs(truncation_at(1e6, b)) <= TRUNCATION_BOUND


@pytest.mark.parametrize("magnitude", [1e3, 1e6, 1e10, 1e50, 1e100, 1e200, 1e300, 1.7e308])
@pytest.mark.parametrize("s", [1e-10, 1e-3, 1.0, 37.5, 1e6])
@pytest.mark.parametrize("beta_s", [1e-6, 0.3, 2.146, 1e4])
def test_bounded_for_huge_inputs(magnitude: float, s: float, beta_s: float) -> None:
    out = smoothed_truncation(np.array([magnitude, -magnitude]), s, beta_s)
    assert np.all(np.isfinite(out))
    assert np.all(np.abs(out) <= s * TRUNCATION_BOUND)
    assert out[0] == -out[1]
    assert out[0] > 0


def test_limit_for_huge_inputs_is_the_gaussian_tail_average() -> None:
    # As x → ∞, E φ(a + bZ) → 2√2/3 · (2Φ(√β_s) − 1): the noise keeps T strictly inside.
    beta_s = 2.146
    out = smoothed_truncation(np.array([1e300]), 1.0, beta_s)[0]
    limit = TRUNCATION_BOUND * (2 * float(ndtr(math.sqrt(beta_s))) - 1)
    assert out == pytest.approx(limit, abs=1e-12)


@pytest.mark.parametrize("value", [0.0, -0.0, 5e-324, -5e-324, 1e-300, 1e-15])
def test_zero_and_tiny_inputs(value: float) -> None:
    out = smoothed_truncation(np.array([value]), 1.0, 2.0)[0]
    # φ(u) ≈ u near 0 and the smoothing noise is proportional to |x|, so T(x) = x to first order.
    assert out == pytest.approx(value, rel=1e-12, abs=0.0)


@pytest.mark.parametrize("s", [1e-300, 1.5, 1e300])
@pytest.mark.parametrize("beta_s", [0.01, 2.0, 1e4])
def test_non_finite_inputs_map_to_the_limit_and_to_zero(s: float, beta_s: float) -> None:
    # ±inf is where huge finite values tend: the Gaussian tail average; NaN carries nothing.
    out = smoothed_truncation(np.array([math.inf, -math.inf, math.nan, -math.nan]), s, beta_s)
    limit = TRUNCATION_BOUND * (2 * float(ndtr(math.sqrt(beta_s))) - 1)
    assert out[0] / s == pytest.approx(limit, abs=1e-12)
    assert out[1] == -out[0]
    assert out[2] == 0.0 and out[3] == 0.0
    # and the value of the largest finite input (a = 1.7e8 only for s = 1e300: O(1/a²) off).
    assert out[0] == pytest.approx(
        smoothed_truncation(np.array([1.7e308]), s, beta_s)[0], rel=1e-14
    )


@pytest.mark.parametrize(
    ("s", "beta_s", "message"),
    [
        (0.0, 1.0, "s must be a finite number > 0, got 0.0"),
        (-1.0, 1.0, "s must be a finite number > 0, got -1.0"),
        (math.nan, 1.0, "s must be a finite number > 0, got nan"),
        (1.0, 0.0, "beta_s must be a finite number > 0, got 0.0"),
        (1.0, math.inf, "beta_s must be a finite number > 0, got inf"),
    ],
)
def test_invalid_parameters_name_parameter_and_value(s: float, beta_s: float, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        smoothed_truncation(np.array([1.0]), s, beta_s)


def test_shape_preserved_and_odd() -> None:
    x = np.random.default_rng(0).normal(0, 3, size=(50, 7))
    out = smoothed_truncation(x, 1.3, 2.1)
    assert out.shape == x.shape
    np.testing.assert_array_equal(smoothed_truncation(-x, 1.3, 2.1), -out)


def test_continuous_across_branch_boundaries() -> None:
    # The three evaluation forms meet at |a| = 0.1, |a| = 3 and b = 3; no jump at the seams.
    for beta_s in (0.5, 1.0, 2.146):
        for edge in (0.1, 3.0, 3.0 * math.sqrt(beta_s)):
            x = np.array([edge * (1 - 1e-12), edge * (1 + 1e-12)])
            out = smoothed_truncation(x, 1.0, beta_s)
            assert abs(out[1] - out[0]) < 1e-11


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(st.floats(width=64), min_size=1, max_size=20),
    s=st.floats(min_value=1e-300, max_value=1e300, allow_nan=False),
    beta_s=st.floats(min_value=1e-300, max_value=1e300, allow_nan=False),
)
def test_any_input_nan_and_inf_included_gives_bounded_finite_output(
    values: list[float], s: float, beta_s: float
) -> None:
    out = smoothed_truncation(np.array(values), s, beta_s)
    assert np.all(np.isfinite(out))
    assert np.all(np.abs(out) <= s * TRUNCATION_BOUND)


@pytest.mark.parametrize("beta_s", [0.5, 1.0, 2.146, 3.0, 10.0, 100.0])
def test_fast_path_agrees_with_the_exact_form_on_a_dense_grid(beta_s: float) -> None:
    # smoothed_truncation evaluates a verified piecewise-polynomial table for |a| < 16;
    # check it against the exact three-form evaluation between and at the table's nodes.
    a = np.linspace(-20.0, 20.0, 400_001)
    sqrt_beta = math.sqrt(beta_s)
    assert _table(sqrt_beta) is not None
    fast = smoothed_truncation(a, 1.0, beta_s)
    exact = _expected_phi(a, sqrt_beta)
    assert np.max(np.abs(fast - exact)) <= 1e-12


@pytest.mark.parametrize("beta_s", [0.5, 1.0, 2.146, 6.3, 100.0])
def test_far_table_agrees_with_the_exact_form_up_to_infinity(beta_s: float) -> None:
    # |a| ≥ 16 goes through the table in t = 1/|a|: check it from 16 to the float range,
    # at inf (t = 0), and at the points where the two tables meet.
    sqrt_beta = math.sqrt(beta_s)
    assert _far_table(sqrt_beta) is not None
    a = np.concatenate(
        [
            np.geomspace(16.0, 1.7e308, 200_001),
            np.nextafter(16.0, 0.0) + np.arange(3) * 1e-15,
            [math.inf, 1e4 * math.pi],
        ]
    )
    a = np.concatenate([a, -a])
    fast = smoothed_truncation(a, 1.0, beta_s)
    with np.errstate(divide="ignore"):
        exact = _expected_phi(a, sqrt_beta)
    assert np.max(np.abs(fast - exact)) <= 1e-12


@pytest.mark.parametrize("a", [16.0, 17.5, 40.0, 300.0, 1e5])
def test_far_table_matches_high_precision_quadrature(a: float) -> None:
    beta_s = 2.146
    b = a / math.sqrt(beta_s)
    assert truncation_at(a, b) == pytest.approx(expected_phi_mpmath(a, b), abs=1e-12)


@pytest.mark.parametrize("d", [1, 10, 1000, 100_000])
@pytest.mark.parametrize("zeta", [1e-12, 1e-6, 0.5])
def test_both_tables_verify_for_every_calibrated_smoothing(d: int, zeta: float) -> None:
    # β_s = √log(d/ζ) ∈ [0.83, 6.3] here: the fast, constant-cost path always applies.
    assert _tables(math.sqrt(smoothing_precision(d, zeta))) is not None


@pytest.mark.parametrize("beta_s", [1e-3, 0.1, 1e4])
def test_table_is_refused_where_it_would_be_inaccurate(beta_s: float) -> None:
    # Outside the verified range the exact form is used for every element.
    assert _table(math.sqrt(beta_s)) is None
    a = np.linspace(-5.0, 5.0, 1001)
    np.testing.assert_array_equal(
        smoothed_truncation(a, 1.0, beta_s), _expected_phi(a, math.sqrt(beta_s))
    )
