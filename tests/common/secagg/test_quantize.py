"""The grid, the exact sum, the integer sensitivity and the modulus
(common/core/secagg_quantize.py)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import skellam

from ldpem.common.core.secagg_quantize import (
    EXACT_LIMIT,
    FINE_BITS,
    dequantize,
    fine_sum,
    grid_step,
    integer_sensitivity,
    modulus_bits,
    quantize_rows,
    round_fine,
    skellam_tail,
)

bounds = st.floats(min_value=1e-100, max_value=1e100, allow_nan=False, allow_infinity=False)


def quantized(rows: np.ndarray, bound: float, grid: float) -> np.ndarray:
    return np.array(round_fine(fine_sum(rows, bound=bound, grid=grid)), dtype=object)


@given(bounds)
def test_the_grid_is_a_power_of_two_with_2B_over_gamma_in_2_to_the_10_and_11(bound: float) -> None:
    grid = grid_step(bound)
    mantissa, _ = math.frexp(grid)
    assert mantissa == 0.5
    ratio = 2.0 * bound / grid  # exact: a power-of-two scaling
    assert 2**10 <= ratio < 2**11


@given(bounds, st.integers(min_value=1, max_value=50))
def test_the_integer_sensitivity_is_the_floor_plus_one(bound: float, d: int) -> None:
    grid = grid_step(bound)
    sensitivity = integer_sensitivity(bound, grid, d)
    exact = Fraction(2.0 * bound) / Fraction(grid) + Fraction(1, 2**FINE_BITS)
    assert sensitivity.linf == math.floor(exact) + 1
    assert sensitivity.l1 == d * sensitivity.linf
    assert sensitivity.l2_squared == d * sensitivity.linf**2
    # The slack costs at most 2^-10 of the sensitivity (plus the fine grid's 2^-30).
    assert sensitivity.linf <= 2.0 * bound / grid * (1.0 + 2.0**-10) + 2.0**-30 + 1e-9


def test_a_power_of_two_bound_gives_exactly_1025() -> None:
    assert grid_step(1.0) == 2.0**-9
    assert integer_sensitivity(1.0, 2.0**-9, 1).linf == 1025


def test_the_rounding_slack_is_needed() -> None:
    """Two neighbouring sums can round in opposite directions: one record moving the sum by
    at most 2B = 1024.6 grid units moves Q by 1025 = Δ∞, more than ⌈2B/γ⌉ would allow."""
    grid = 2.0**-9
    bound = 1024.6 * grid / 2.0
    assert grid_step(bound) == grid
    others = np.array([[0.25 * grid]])  # the other records' sum, fixed
    first = np.concatenate([others, [[bound]]])
    second = np.concatenate([others, [[-bound]]])
    gap = abs(int(quantized(first, bound, grid)[0]) - int(quantized(second, bound, grid)[0]))
    assert gap == integer_sensitivity(bound, grid, 1).linf == 1025


@settings(max_examples=60, deadline=None)
@given(
    st.integers(min_value=0, max_value=400),
    st.integers(min_value=1, max_value=4),
    st.floats(min_value=1e-3, max_value=1e3),
    st.integers(min_value=0, max_value=2**32 - 1),
)
def test_replacing_one_record_moves_the_quantized_sum_by_at_most_the_sensitivity(
    n: int, d: int, bound: float, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    grid = grid_step(bound)
    others = rng.uniform(-bound, bound, (n, d))
    # Candidates for the replaced record: the extremes, and random values.
    candidates = np.concatenate(
        [np.full((1, d), bound), np.full((1, d), -bound), rng.uniform(-bound, bound, (6, d))]
    )
    sums = [quantized(np.concatenate([others, c[None, :]]), bound, grid) for c in candidates]
    limit = integer_sensitivity(bound, grid, d).linf
    for first in sums:
        for second in sums:
            assert max(abs(int(a) - int(b)) for a, b in zip(first, second, strict=True)) <= limit


@settings(max_examples=40, deadline=None)
@given(
    st.integers(min_value=1, max_value=2000),
    st.floats(min_value=1e-6, max_value=1e6),
    st.integers(min_value=0, max_value=2**32 - 1),
)
def test_the_quantized_sum_is_the_exact_sum_rounded_once(n: int, bound: float, seed: int) -> None:
    """|Q − S/γ| ≤ 1/2 + n·2^-31 with S the exact real sum: one rounding of the sum (the
    fine grid adds at most 2^-31 per record), not n roundings."""
    rng = np.random.default_rng(seed)
    grid = grid_step(bound)
    rows = rng.uniform(-bound, bound, (n, 1)) * rng.choice([1.0, 1e-9, 1e-300], (n, 1))
    exact = sum((Fraction(float(v)) for v in rows[:, 0]), Fraction(0)) / Fraction(grid)
    q = int(quantized(rows, bound, grid)[0])
    assert abs(q - exact) <= Fraction(1, 2) + Fraction(n, 2 ** (FINE_BITS + 1))


def test_the_sum_does_not_depend_on_the_chunks() -> None:
    rng = np.random.default_rng(3)
    bound = 2.5
    grid = grid_step(bound)
    rows = rng.uniform(-bound, bound, (1000, 3))
    whole = fine_sum(rows, bound=bound, grid=grid)
    parts = sum(
        (fine_sum(rows[i : i + 37], bound=bound, grid=grid) for i in range(0, 1000, 37)),
        np.zeros(3, dtype=object),
    )
    assert list(whole) == list(parts)


def test_contributions_outside_the_bound_or_not_finite_are_clipped() -> None:
    bound = 1.0
    grid = grid_step(bound)
    rows = np.array([[np.inf, -np.inf, np.nan, 5.0]])
    q = [int(v) for v in quantized(rows, bound, grid)]
    assert q == [512, -512, 0, 512]  # B/γ = 512


def test_rows_are_quantized_as_single_record_sums() -> None:
    rng = np.random.default_rng(4)
    bound = 0.37
    grid = grid_step(bound)
    rows = rng.uniform(-bound, bound, (500, 4))
    ties = np.array([0.5, -0.5, 1.5, -1.5, 2.5]) * grid  # exactly half-way: to even
    rows[:5] = ties[:, None]
    vectorised = quantize_rows(rows, bound=bound, grid=grid)
    one_by_one = np.array([[int(v) for v in quantized(row[None, :], bound, grid)] for row in rows])
    np.testing.assert_array_equal(vectorised, one_by_one)
    np.testing.assert_array_equal(vectorised[:5, 0], [0, 0, 2, -2, 2])


def test_a_grid_other_than_a_power_of_two_or_coarser_than_needed_is_refused() -> None:
    rows = np.zeros((1, 1))
    with pytest.raises(ValueError, match=r"grid must be a power of two, got 0\.3"):
        fine_sum(rows, bound=1.0, grid=0.3)
    with pytest.raises(ValueError, match="coarser"):
        fine_sum(rows, bound=1.0, grid=2.0**-12)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.integers(min_value=-(2**43), max_value=2**43), min_size=1, max_size=300),
    st.integers(min_value=-60, max_value=60),
)
def test_floats_on_the_grid_sum_exactly(values: list[int], exponent: int) -> None:
    """γ·q is exact, and math.fsum (the M-step's aggregate) of such floats is γ·Σq: the
    simulator's float path equals a federated run's integer sum times γ, bit for bit."""
    grid = math.ldexp(1.0, exponent)
    floats = [float(dequantize(np.array([v]), grid)[0]) for v in values]
    assert all(
        Fraction(f) == Fraction(v) * Fraction(grid) for f, v in zip(floats, values, strict=True)
    )
    assert math.fsum(floats) == sum(values) * grid


def test_dequantize_refuses_integers_beyond_2_to_the_53() -> None:
    assert float(dequantize(np.array([EXACT_LIMIT - 1], dtype=object), 1.0)[0]) == 2.0**53 - 1
    with pytest.raises(ValueError, match="not exact"):
        dequantize(np.array([EXACT_LIMIT], dtype=object), 1.0)


@pytest.mark.parametrize("mean", [0.5, 7.0, 60.0, 900.0])
@pytest.mark.parametrize("failure", [1e-3, 1e-9])
def test_the_skellam_tail_bound_holds_and_is_not_loose(mean: float, failure: float) -> None:
    t = skellam_tail(mean, failure=failure)
    reach = t + 60 + math.ceil(60 * math.sqrt(2 * mean))
    pmf = skellam.pmf(np.arange(reach), mean, mean)
    # beyond[k] = P(|Z| > k), from the pmf's suffix sums (symmetric: twice one side).
    beyond = 2.0 * (np.cumsum(pmf[::-1])[::-1] - pmf)
    assert beyond[t] <= failure
    # The Chernoff bound is within a factor ~2 of the exact quantile here.
    exact = int(np.argmax(beyond <= failure))
    assert exact <= t <= 2 * exact + 5


def test_modulus_bits_from_public_bounds() -> None:
    bound = 1.0  # γ = 2^-9, B/γ = 512
    bits = modulus_bits(records=1000, holders=10, bound=bound, grid=2.0**-9, share_mean=1e6, d=5)
    data = math.ceil(1000 * (512 + 2.0**-31) + 5)
    largest = data + skellam_tail(10 * 1e6, failure=2.0**-40 / 5)
    assert bits == largest.bit_length() + 1
    assert 2 ** (bits - 1) > largest
    # More records or holders never need fewer bits.
    assert (
        modulus_bits(records=2000, holders=10, bound=bound, grid=2.0**-9, share_mean=1e6, d=5)
        >= bits
    )


def test_modulus_bits_refuses_a_round_that_could_leave_the_exact_range() -> None:
    with pytest.raises(ValueError, match="beyond 2\\^53"):
        modulus_bits(records=10**14, holders=10, bound=1.0, grid=2.0**-9, share_mean=1.0, d=1)
