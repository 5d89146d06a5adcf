"""A simulated holder's float sums (``holder_sum._holder_sum``) are the sums of its
mechanism's own contributions: clipping by one product of row factors, to rounding, with
``clip_rows`` itself for rows it cannot take; no noise by a product with ones."""

from __future__ import annotations

import numpy as np
import pytest

from ldpem.common.mechanisms import LocalClipped, Mechanism, get_mechanism
from ldpem.common.mechanisms.base import FloatArray
from ldpem.common.planning import holder_sum
from ldpem.common.planning.holder_sum import _clipped_sum, _holder_sum


def local_clip(clip: float = 1.0) -> Mechanism:
    return LocalClipped(clip=clip, noise_std=0.5)


@pytest.mark.parametrize("spread", [1e-6, 0.3, 1.0, 3.0, 1e6, 1e140])
def test_the_clipped_sum_is_the_sum_of_clip_rows(spread: float) -> None:
    mechanism = local_clip(clip=1.5)
    gradients = np.random.default_rng(3).standard_normal((2000, 5)) * spread
    expected = mechanism.contributions(gradients.copy()).sum(axis=0)
    found = _holder_sum(mechanism, gradients.copy())
    # Each row errs by a few ulps of its clipped value (norm ≤ C).
    assert np.max(np.abs(found - expected)) <= 2000 * 1.5 * 1e-14
    assert _clipped_sum(mechanism, gradients) is not None


@pytest.mark.parametrize("odd", [np.nan, np.inf, -np.inf, 1e200])
def test_rows_the_product_cannot_take_are_clip_rows_own(odd: float) -> None:
    mechanism = local_clip()
    gradients = np.random.default_rng(4).standard_normal((50, 3))
    gradients[7, 1] = odd
    assert _clipped_sum(mechanism, gradients) is None
    expected = mechanism.contributions(gradients.copy()).sum(axis=0)
    found = _holder_sum(mechanism, gradients.copy())
    assert np.all(np.isfinite(found))
    np.testing.assert_allclose(found, expected, rtol=1e-12, atol=1e-12)


def test_other_float_sums_are_their_contributions_summed() -> None:
    none = get_mechanism("none")()
    gradients = np.random.default_rng(5).standard_normal((300, 4))
    assert _clipped_sum(none, gradients) is None
    np.testing.assert_allclose(
        _holder_sum(none, gradients.copy()), gradients.sum(axis=0), rtol=1e-12, atol=1e-12
    )
    assert holder_sum.CHUNK >= 1024


def test_a_subclass_with_its_own_contributions_is_summed_by_them() -> None:
    class Halved(LocalClipped):
        def contributions(self, gradients: FloatArray) -> FloatArray:
            return 0.5 * super().contributions(gradients)

    class Inherits(LocalClipped):
        pass

    mechanism = Halved(clip=1.0, noise_std=0.5)
    gradients = np.random.default_rng(5).standard_normal((100, 3))
    assert _clipped_sum(mechanism, gradients) is None
    expected = mechanism.contributions(gradients.copy()).sum(axis=0)
    np.testing.assert_allclose(_holder_sum(mechanism, gradients.copy()), expected, rtol=1e-12)
    assert _clipped_sum(Inherits(clip=1.0, noise_std=0.5), gradients) is not None
