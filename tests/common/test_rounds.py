"""One data holder's round: chunked, bounded, and the same as the unchunked sum."""

from __future__ import annotations

import numpy as np
import pytest

from ldpem.common.mechanisms import LocalTruncation, NoPrivacy
from ldpem.common.models import Records, get_model
from ldpem.common.rounds import holder_round
from ldpem.common.truncation_bound import truncation_bound


def test_chunked_sum_equals_the_direct_sum() -> None:
    model = get_model("mrm")
    records, beta_star = model.generate(1000, 4, rng=np.random.default_rng(0))
    mech = LocalTruncation(scale=1.0, smoothing=2.0, noise_std=0.0)
    report = holder_round(
        model=model,
        beta=beta_star,
        records=records,
        sigma=1.0,
        mechanism=mech,
        rng=np.random.default_rng(1),
        chunk=37,
    )
    direct = mech.contributions(model.gradients(beta_star, records, 1.0)).sum(axis=0)
    np.testing.assert_allclose(report.total, direct, rtol=1e-12, atol=1e-12)
    assert report.count == 1000
    assert np.all(np.abs(report.total) <= 1000 * mech.scale * truncation_bound(mech.smoothing))


def test_noise_is_drawn_once_for_the_whole_sum() -> None:
    model = get_model("gmm")
    records, beta_star = model.generate(500, 3, rng=np.random.default_rng(2))
    mech = LocalTruncation(scale=1.0, smoothing=2.0, noise_std=5.0)
    kwargs = {"model": model, "beta": beta_star, "records": records, "sigma": 1.0}
    one = holder_round(mechanism=mech, rng=np.random.default_rng(3), chunk=7, **kwargs)
    two = holder_round(mechanism=mech, rng=np.random.default_rng(3), chunk=500, **kwargs)
    # Same seed, different chunking: the same report, because noise does not depend on chunks.
    np.testing.assert_allclose(one.total, two.total, rtol=1e-12)


def test_rejects_bad_beta_and_non_finite_gradients() -> None:
    model = get_model("gmm")
    records = Records(np.array([[1.0, 2.0], [np.nan, 1.0]]))
    kwargs = {"model": model, "records": records, "sigma": 1.0, "mechanism": NoPrivacy()}
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match=r"beta must have shape \(2,\), got \(3,\)"):
        holder_round(beta=np.zeros(3), rng=rng, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="beta must be finite"):
        holder_round(beta=np.array([np.inf, 0.0]), rng=rng, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"gradients at records 0\.\.1 are not finite"):
        holder_round(beta=np.ones(2), rng=rng, **kwargs)  # type: ignore[arg-type]
