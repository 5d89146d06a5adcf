"""Skellam noise shares against the exact pmf (common/core/secagg_noise.py).

The exact pmf of Sk(λ) = Poisson(λ) − Poisson(λ) is P(k) = e^{−2λ} I_|k|(2λ) (``ive``);
it agrees with scipy.stats.skellam (a different algorithm, through the non-central
chi-square) to 1e-10 relative wherever the latter is above 1e-300, checked below. Each
chi-square test has a fixed seed; its threshold is the 1 − 1e-6 quantile of the
chi-square law with the test's degrees of freedom, so a correct sampler would fail it
for one seed in a million.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import ive
from scipy.stats import chi2, skellam

from ldpem.common.core.secagg_noise import MAX_MEAN, os_generator, skellam_noise

DRAWS = 200_000
#: Expected count of each bin of the chi-square test, at least.
BIN_COUNT = 50
LEVEL = 1e-6


def exact_pmf(k: np.ndarray, mean: float) -> np.ndarray:
    return np.asarray(ive(np.abs(k).astype(np.float64), 2.0 * mean))


def chi_square(draws: np.ndarray, mean: float) -> tuple[float, int]:
    """The chi-square statistic of integer ``draws`` against Sk(mean), with consecutive
    integers grouped into bins of expected count ≥ BIN_COUNT (the tails beyond the window,
    of mass below 1e-30, into the outer bins), and its degrees of freedom."""
    reach = math.ceil(12.0 * math.sqrt(2.0 * mean)) + 20
    support = np.arange(-reach, reach + 1)
    expected = exact_pmf(support, mean) * draws.size
    missing = draws.size - expected.sum()
    expected[0] += missing / 2.0
    expected[-1] += missing / 2.0
    counts = np.bincount(np.clip(draws, -reach, reach) + reach, minlength=support.size)
    # Cut where the running expected count passes a multiple of BIN_COUNT; the last bin
    # takes what is left after the last full one.
    running = np.cumsum(expected)
    cuts = np.searchsorted(running, np.arange(BIN_COUNT, running[-1] - BIN_COUNT, BIN_COUNT))
    edges = [0, *sorted(set((cuts + 1).tolist()) - {0, support.size})]
    observed = np.add.reduceat(counts, edges[:-1])
    wanted = np.add.reduceat(expected, edges[:-1])
    statistic = float(np.sum((observed - wanted) ** 2 / wanted))
    return statistic, len(wanted) - 1


def test_the_exact_pmf_agrees_with_scipys_skellam() -> None:
    for mean in (0.3, 4.0, 50.0, 1e4, 1e7):
        k = np.arange(-int(8 * math.sqrt(2 * mean)) - 10, int(8 * math.sqrt(2 * mean)) + 10)
        ours, theirs = exact_pmf(k, mean), skellam.pmf(k, mean, mean)
        shown = theirs > 1e-300
        np.testing.assert_allclose(ours[shown], theirs[shown], rtol=1e-10)


@pytest.mark.parametrize("mean", [0.3, 4.0, 50.0, 1e4, 1e7])
def test_draws_follow_the_exact_pmf(mean: float) -> None:
    draws = skellam_noise(mean, DRAWS, np.random.default_rng(20_260_000 + int(mean * 10)))
    assert draws.dtype == np.int64 and draws.shape == (DRAWS,)
    statistic, freedom = chi_square(draws, mean)
    assert freedom >= 5
    assert statistic <= chi2.ppf(1.0 - LEVEL, freedom), (statistic, freedom)


@pytest.mark.parametrize("mean", [0.3, 4.0, 50.0, 1e4, 1e7])
def test_mean_and_variance_are_zero_and_twice_the_mean(mean: float) -> None:
    """Sharper than the chi-square on the spread: the sample variance of N draws has
    relative standard error √((2 + κ)/N), κ = 1/(2λ) the excess kurtosis of Sk(λ); six of
    them is the tolerance (a 3% error in the variance fails at λ ≥ 4)."""
    draws = skellam_noise(mean, DRAWS, np.random.default_rng(7)).astype(np.float64)
    variance = 2.0 * mean
    assert abs(draws.mean()) <= 6.0 * math.sqrt(variance / DRAWS)
    spread = 6.0 * math.sqrt((2.0 + 1.0 / (2.0 * mean)) / DRAWS)
    assert abs(draws.var() / variance - 1.0) <= spread


@pytest.mark.parametrize(("mean", "shares"), [(0.7, 3), (2500.0, 7)])
def test_shares_add_up_to_the_skellam_of_the_summed_mean(mean: float, shares: int) -> None:
    """Any t shares of Sk(λ) sum to Sk(tλ) exactly: the noise of t_min honest holders."""
    rng = np.random.default_rng(11)
    total = sum((skellam_noise(mean, DRAWS, rng) for _ in range(shares)), np.zeros(DRAWS, int))
    statistic, freedom = chi_square(np.asarray(total), shares * mean)
    assert statistic <= chi2.ppf(1.0 - LEVEL, freedom), (statistic, freedom)


def test_a_seeded_generator_reproduces_and_the_os_one_does_not() -> None:
    first = skellam_noise(1e6, 8, np.random.default_rng(5))
    np.testing.assert_array_equal(first, skellam_noise(1e6, 8, np.random.default_rng(5)))
    assert skellam_noise(1e6, (2, 3)).shape == (2, 3)  # a fresh OS-seeded generator
    assert not np.array_equal(skellam_noise(1e6, 16), skellam_noise(1e6, 16))
    assert not np.array_equal(
        os_generator().integers(0, 2**62, 4), os_generator().integers(0, 2**62, 4)
    )


@pytest.mark.parametrize("mean", [0.0, -1.0, math.inf, math.nan, 2 * MAX_MEAN])
def test_a_mean_out_of_range_is_refused(mean: float) -> None:
    with pytest.raises(ValueError, match="mean must be a finite number in"):
        skellam_noise(mean, 3, np.random.default_rng(0))
