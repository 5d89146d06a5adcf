"""Mechanisms: noise level, range before noise, clipping, the summed report."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from scipy import stats

from ldpem.common.core.truncation_bound import truncation_bound
from ldpem.common.mechanisms import (
    CentralClipped,
    CentralTruncation,
    LocalClipped,
    LocalTruncation,
    NoPrivacy,
    clip_rows,
)


def heavy_tailed_gradients(n: int, d: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    g = rng.standard_t(df=2, size=(n, d)) * 5
    g[0] = 1e300
    g[1] = -1e300
    g[2] = 0.0
    return g


def std_interval(samples: np.ndarray, level: float = 1e-6) -> tuple[float, float]:
    """Two-sided chi-square confidence interval for the std of zero-mean Gaussian samples."""
    k = samples.size
    ss = float(np.sum(samples**2))
    lo = math.sqrt(ss / stats.chi2.ppf(1 - level / 2, k))
    hi = math.sqrt(ss / stats.chi2.ppf(level / 2, k))
    return lo, hi


def test_local_reports_are_bounded_before_noise() -> None:
    mech = LocalTruncation(scale=1.7, smoothing=2.1, noise_std=0.0)
    reports = mech.privatize(heavy_tailed_gradients(5000, 6, 0), np.random.default_rng(1))
    bound = 1.7 * truncation_bound(2.1)
    assert np.max(np.abs(reports)) <= bound
    assert mech.record_bound(6) == pytest.approx(bound)
    assert mech.sensitivity(6) == pytest.approx(2 * bound * math.sqrt(6))


def test_local_noise_has_the_stated_std() -> None:
    noise_std = 3.3
    mech = LocalTruncation(scale=1.0, smoothing=2.0, noise_std=noise_std)
    g = heavy_tailed_gradients(20000, 5, 2)
    noise = mech.privatize(g, np.random.default_rng(3)) - mech.contributions(g)
    lo, hi = std_interval(noise)
    assert lo <= noise_std <= hi
    assert abs(float(noise.mean())) < 6 * noise_std / math.sqrt(noise.size)


def test_holder_sum_has_the_distribution_of_summed_reports() -> None:
    # Σ (T(g_i) + N(0, σ²)) and Σ T(g_i) + N(0, m σ²) are the same law: check the noise std.
    noise_std, m, d = 2.0, 400, 3
    mech = LocalTruncation(scale=1.0, smoothing=2.0, noise_std=noise_std)
    g = heavy_tailed_gradients(m, d, 4)
    base = mech.contributions(g).sum(axis=0)
    rng = np.random.default_rng(5)
    draws = np.array([mech.holder_sum(g, rng) - base for _ in range(3000)])
    lo, hi = std_interval(draws)
    assert lo <= noise_std * math.sqrt(m) <= hi


def test_central_adds_noise_once_on_the_average() -> None:
    mech = CentralTruncation(scale=1.0, smoothing=2.0, noise_std=0.5)
    g = heavy_tailed_gradients(100, 4, 6)
    rng = np.random.default_rng(7)
    np.testing.assert_array_equal(mech.holder_sum(g, rng), mech.contributions(g).sum(axis=0))
    noise = np.array([mech.aggregate_noise(4, rng) for _ in range(5000)])
    lo, hi = std_interval(noise)
    assert lo <= 0.5 <= hi


def test_local_mechanisms_add_no_aggregate_noise() -> None:
    rng = np.random.default_rng(0)
    for mech in (
        LocalTruncation(scale=1.0, smoothing=2.0, noise_std=1.0),
        LocalClipped(clip=1.0, noise_std=1.0),
        NoPrivacy(),
    ):
        np.testing.assert_array_equal(mech.aggregate_noise(3, rng), np.zeros(3))


def test_clipping_bounds_the_norm_and_keeps_small_rows() -> None:
    g = heavy_tailed_gradients(2000, 5, 8)
    clipped = clip_rows(g, 2.5)
    norms = np.linalg.norm(clipped, axis=1)
    assert np.all(norms <= 2.5 * (1 + 1e-12))
    peak = np.max(np.abs(g), axis=1)
    small = peak * np.linalg.norm(g / np.where(peak > 0, peak, 1)[:, None], axis=1) <= 2.5
    np.testing.assert_array_equal(clipped[small], g[small])
    # Direction is kept for rows that were shrunk, the ±1e300 rows included.
    big = ~small
    unit = g[big] / np.max(np.abs(g[big]), axis=1, keepdims=True)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    np.testing.assert_allclose(clipped[big], 2.5 * unit, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(clipped[2], np.zeros(5))


def test_clipped_mechanisms_state_bound_and_sensitivity() -> None:
    assert LocalClipped(clip=2.0, noise_std=1.0).sensitivity(7) == 4.0
    assert CentralClipped(clip=2.0, noise_std=1.0).record_bound(7) == 2.0


def test_no_privacy_passes_gradients_through() -> None:
    g = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(NoPrivacy().holder_sum(g, np.random.default_rng(0)), [3, 5, 7])
    assert math.isinf(NoPrivacy().sensitivity(3))


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        (lambda: LocalTruncation(scale=0.0, smoothing=1.0, noise_std=1.0), "scale must be"),
        (lambda: LocalTruncation(scale=1.0, smoothing=-2.0, noise_std=1.0), "smoothing must be"),
        (lambda: LocalTruncation(scale=1.0, smoothing=1.0, noise_std=-1.0), "noise_std must be"),
        (
            lambda: LocalTruncation(scale=1.0, smoothing=1.0, noise_std=math.nan),
            "noise_std must be",
        ),
        (lambda: LocalClipped(clip=math.inf, noise_std=1.0), "clip must be"),
    ],
)
def test_invalid_parameters_are_refused(factory: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        factory()


def test_keyword_only_parameters() -> None:
    with pytest.raises(TypeError):
        # Deliberately positional: the test is that the constructor refuses it.
        LocalTruncation(1.0, 2.0, 3.0)  # type: ignore[call-arg]


def test_clipping_maps_non_finite_rows_to_bounded_rows() -> None:
    # NaN counts as 0; infinite entries give their direction at norm C.
    rows = np.array(
        [
            [3.0, math.nan],
            [math.inf, 5.0],
            [-math.inf, math.inf],
            [math.nan, math.nan],
            [math.nan, -math.inf],
            [1e308, math.inf],
        ]
    )
    root = math.sqrt(2.0)
    expected = np.array(
        [[2.0, 0.0], [2.0, 0.0], [-root, root], [0.0, 0.0], [0.0, -2.0], [0.0, 2.0]]
    )
    np.testing.assert_allclose(clip_rows(rows, 2.0), expected, rtol=1e-15, atol=0.0)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_no_privacy_refuses_non_finite_gradients(bad: float) -> None:
    # The one mechanism without a bound: nothing bounded to map NaN or inf to.
    with pytest.raises(ValueError, match="mechanism 'none' needs finite gradients"):
        NoPrivacy().privatize(np.array([[1.0, bad]]), np.random.default_rng(0))


def test_gradients_must_be_two_dimensional() -> None:
    with pytest.raises(ValueError, match=r"gradients must be an \(n, d\) array, got shape \(3,\)"):
        NoPrivacy().holder_sum(np.ones(3), np.random.default_rng(0))
