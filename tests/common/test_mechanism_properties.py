"""Property-based tests (hypothesis) of the mechanisms on arbitrary inputs.

Any float array (±1e308, subnormals, zeros, mixed magnitudes, NaN and ±inf), any scale
s > 0 and smoothing β_s > 0, any clip C > 0: every record's contribution is finite and
within the bound the privacy proof uses, the reports and the holder's sum are finite, and
invalid parameters raise ValueError. Non-finite gradients are never refused by a bounded
mechanism (a refusal would leak whether a record overflows); only ``none`` refuses them.
RuntimeWarnings from ldpem are errors (pyproject), so an overflow inside a mechanism
fails these tests too.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ldpem.common.core.truncation_bound import truncation_bound
from ldpem.common.mechanisms import (
    CentralTruncation,
    LocalClipped,
    LocalTruncation,
    Mechanism,
    NoPrivacy,
)

EXAMPLES = settings(
    max_examples=100,
    deadline=None,  # the machine is shared and loaded: no per-example time limit
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,  # reproducible in CI
)

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
special = st.sampled_from(
    [0.0, -0.0, 5e-324, -5e-324, 2.2e-308, 1e-300, -1e-300, 1e300, -1e300, 1.7e308, -1.7e308]
)
non_finite = st.sampled_from([math.nan, math.inf, -math.inf])
values = st.one_of(finite, special, non_finite)
gradients = st.integers(1, 6).flatmap(
    lambda d: arrays(np.float64, st.tuples(st.integers(1, 8), st.just(d)), elements=values)
)
positive = st.floats(min_value=5e-324, max_value=1.7e308, allow_nan=False, allow_infinity=False)
# The mechanisms run on real data at scales within these, but accept the full positive range.
noise = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)
not_positive = st.one_of(
    st.floats(max_value=0.0), st.just(math.nan), st.just(math.inf), st.just(-math.inf)
)


def check(mechanism: Mechanism, g: np.ndarray) -> None:
    d = g.shape[1]
    bound = mechanism.record_bound(d)
    contributions = mechanism.contributions(g)
    assert contributions.shape == g.shape
    assert np.all(np.isfinite(contributions))
    assert np.all(np.abs(contributions) <= bound)
    rng = np.random.default_rng(0)
    reports = mechanism.privatize(g, rng)
    assert reports.shape == g.shape and np.all(np.isfinite(reports))
    if g.shape[0] * bound > 1e307:
        return  # the sum of n bounded values may exceed the float range: nothing to check
    total = mechanism.holder_sum(g, rng)
    assert total.shape == (d,) and np.all(np.isfinite(total))
    if mechanism.noise_std == 0.0:
        assert np.all(np.abs(reports) <= bound)
        assert np.all(np.abs(total) <= g.shape[0] * bound * (1 + 1e-12))


@EXAMPLES
@given(g=gradients, scale=positive, smoothing=positive, noise_std=noise)
def test_local_truncation_is_bounded_and_finite(
    g: np.ndarray, scale: float, smoothing: float, noise_std: float
) -> None:
    mechanism = LocalTruncation(scale=scale, smoothing=smoothing, noise_std=noise_std)
    assert mechanism.record_bound(g.shape[1]) == scale * truncation_bound(smoothing)
    check(mechanism, g)


@EXAMPLES
@given(g=gradients, scale=positive, smoothing=positive)
def test_central_truncation_is_bounded_and_finite(
    g: np.ndarray, scale: float, smoothing: float
) -> None:
    check(CentralTruncation(scale=scale, smoothing=smoothing, noise_std=0.0), g)


@EXAMPLES
@given(g=gradients, clip=positive, noise_std=noise)
def test_local_clipped_is_bounded_and_finite(g: np.ndarray, clip: float, noise_std: float) -> None:
    mechanism = LocalClipped(clip=clip, noise_std=noise_std)
    check(mechanism, g)
    if 1e-290 < clip < 1e290:  # relative precision of subnormal clips is meaningless
        norms = np.sqrt(np.sum((mechanism.contributions(g) / clip) ** 2, axis=1))
        assert np.all(norms <= 1.0 + 1e-9)


@EXAMPLES
@given(bad=not_positive, good=positive)
def test_invalid_parameters_raise_value_error(bad: float, good: float) -> None:
    with pytest.raises(ValueError):
        LocalTruncation(scale=bad, smoothing=good, noise_std=1.0)
    with pytest.raises(ValueError):
        LocalTruncation(scale=good, smoothing=bad, noise_std=1.0)
    with pytest.raises(ValueError):
        CentralTruncation(scale=bad, smoothing=good, noise_std=0.0)
    with pytest.raises(ValueError):
        LocalClipped(clip=bad, noise_std=1.0)
    if bad != 0.0:  # noise_std = 0 is allowed (no noise)
        with pytest.raises(ValueError):
            LocalTruncation(scale=good, smoothing=good, noise_std=bad)
        with pytest.raises(ValueError):
            LocalClipped(clip=good, noise_std=bad)


@EXAMPLES
@given(g=gradients, poison=non_finite, where=st.integers(0, 1000), whole_row=st.booleans())
def test_non_finite_gradients_give_bounded_contributions(
    g: np.ndarray, poison: float, where: int, whole_row: bool
) -> None:
    g = g.copy()
    if whole_row:
        g[where % g.shape[0]] = poison
    else:
        g.flat[where % g.size] = poison
    for mechanism in (
        LocalTruncation(scale=1.0, smoothing=2.0, noise_std=1.0),
        CentralTruncation(scale=1e-3, smoothing=0.7, noise_std=0.0),
        LocalClipped(clip=1.0, noise_std=1.0),
        LocalClipped(clip=1e300, noise_std=0.0),
    ):
        check(mechanism, g)
    with pytest.raises(ValueError, match="mechanism 'none' needs finite gradients"):
        NoPrivacy().holder_sum(g, np.random.default_rng(0))


@EXAMPLES
@given(g=gradients)
def test_truncation_is_odd_and_clipping_is_sign_symmetric_on_any_input(g: np.ndarray) -> None:
    # Non-finite inputs included: −NaN is NaN, and −inf maps to minus the image of inf.
    truncation = LocalTruncation(scale=1.0, smoothing=2.0, noise_std=0.0)
    clipped = LocalClipped(clip=1.0, noise_std=0.0)
    for mechanism in (truncation, clipped):
        np.testing.assert_array_equal(mechanism.contributions(-g), -mechanism.contributions(g))


@pytest.mark.parametrize("shape", [(3,), (2, 2, 2), (0,)])
def test_wrong_shapes_raise_value_error(shape: tuple[int, ...]) -> None:
    with pytest.raises(ValueError):
        LocalTruncation(scale=1.0, smoothing=2.0, noise_std=1.0).privatize(
            np.zeros(shape), np.random.default_rng(0)
        )
