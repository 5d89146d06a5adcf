"""``truncated_sum`` is Σ smoothed_truncation to the table's stated error, at every scale of
values (tiny, moderate, huge, ±inf, NaN), and its table refuses to be looser than that."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ldpem.common.core.truncation import smoothed_truncation
from ldpem.common.core.truncation_bound import truncation_bound
from ldpem.common.planning.truncation_sum import (
    CELLS,
    TABLE_ERROR,
    signed_table,
    truncated_sum,
    truncation_table,
)

#: β_s = √log(d/ζ) at d = 10, ζ = 1e-3 (about the default) and at the range's ends.
SMOOTHINGS = (0.83, math.sqrt(math.log(10 / 1e-3)), 6.3)


@pytest.mark.parametrize("beta_s", SMOOTHINGS)
@pytest.mark.parametrize("spread", [1e-6, 0.3, 3.0, 30.0, 1e6, 1e300])
def test_the_sum_is_the_exact_one_within_the_table_error(beta_s: float, spread: float) -> None:
    rng = np.random.default_rng(7)
    values = rng.standard_normal((3000, 4)) * spread
    s = 2.5
    exact = smoothed_truncation(values, s, beta_s).sum(axis=0)
    # Each term errs by at most TABLE_ERROR·s (the interpolation bound the table checks).
    assert np.max(np.abs(truncated_sum(values.copy(), s, beta_s) - exact)) <= (
        values.shape[0] * TABLE_ERROR * s
    )


def test_non_finite_values_count_as_the_mechanism_counts_them() -> None:
    values = np.array([[np.inf, -np.inf, np.nan, 0.0], [1.0, -1.0, 1e308, -1e-300]])
    s, beta_s = 1.5, SMOOTHINGS[1]
    exact = smoothed_truncation(values, s, beta_s).sum(axis=0)
    found = truncated_sum(values.copy(), s, beta_s)
    assert np.all(np.isfinite(found))
    assert np.max(np.abs(found - exact)) <= 2 * TABLE_ERROR * s
    assert np.all(np.abs(found) <= 2 * s * truncation_bound(beta_s))


def test_the_table_is_checked_against_the_exact_form() -> None:
    values, slopes = truncation_table(math.sqrt(SMOOTHINGS[1]))
    assert values[0] == 0.0 and slopes[-1] == 0.0
    assert np.all(np.abs(values) <= truncation_bound(SMOOTHINGS[1]))
    with pytest.raises(ValueError, match="sqrt_beta must be"):
        truncation_table(-1.0)


def test_the_signed_table_is_the_checked_one_mirrored() -> None:
    sqrt_beta = math.sqrt(SMOOTHINGS[1])
    half, _ = truncation_table(sqrt_beta)
    signed, slopes = signed_table(sqrt_beta)
    assert signed.shape == slopes.shape == (2 * CELLS + 1,)
    # Value for value: E φ at u and −E φ at −u; the middle is a = 0.
    assert np.array_equal(signed[CELLS:], half)
    assert np.array_equal(signed[:CELLS], -half[:0:-1])
    assert np.array_equal(slopes[:-1], np.diff(signed)) and slopes[-1] == 0.0
    # So a value and its negative cancel, to rounding, at every scale.
    values = np.geomspace(1e-9, 1e300, 200)[:, None]
    both = np.vstack([values, -values])
    assert abs(truncated_sum(both, 2.5, SMOOTHINGS[1])[0]) <= 1e-12 * 2.5 * values.size
