"""One data holder's round: chunked, bounded, and the same as the unchunked sum."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ldpem.common.core.truncation_bound import truncation_bound
from ldpem.common.mechanisms import (
    CentralTruncation,
    LocalClipped,
    LocalTruncation,
    Mechanism,
    NoPrivacy,
)
from ldpem.common.models import Records, get_model
from ldpem.common.protocol.rounds import holder_round


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
    kwargs: dict[str, Any] = {"model": model, "beta": beta_star, "records": records, "sigma": 1.0}
    one = holder_round(mechanism=mech, rng=np.random.default_rng(3), chunk=7, **kwargs)
    two = holder_round(mechanism=mech, rng=np.random.default_rng(3), chunk=500, **kwargs)
    # Same seed, different chunking: the same report, because noise does not depend on chunks.
    np.testing.assert_allclose(one.total, two.total, rtol=1e-12)


def test_rejects_bad_beta_and_no_privacy_refuses_non_finite_gradients() -> None:
    model = get_model("gmm")
    records = Records(np.array([[1.0, 2.0], [np.nan, 1.0]]))
    kwargs: dict[str, Any] = {
        "model": model,
        "records": records,
        "sigma": 1.0,
        "mechanism": NoPrivacy(),
    }
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match=r"beta must have shape \(2,\), got \(3,\)"):
        holder_round(beta=np.zeros(3), rng=rng, **kwargs)
    with pytest.raises(ValueError, match="beta must be finite"):
        holder_round(beta=np.array([np.inf, 0.0]), rng=rng, **kwargs)
    # Only the non-private mechanism, which has no bound, refuses (see NoPrivacy).
    with pytest.raises(ValueError, match="mechanism 'none' needs finite gradients"):
        holder_round(beta=np.ones(2), rng=rng, **kwargs)


MECHANISMS = [
    LocalTruncation(scale=1.0, smoothing=2.0, noise_std=0.0),
    CentralTruncation(scale=3.0, smoothing=0.9, noise_std=0.0),
    LocalClipped(clip=1.5, noise_std=0.0),
]
EDGE_VALUES = [1e308, -1.7e308, 1e-300, 5e-324, -5e-324, 0.0, np.nan, np.inf, -np.inf]


def one_record(model_name: str, x: np.ndarray, y: float = 1.0) -> Records:
    has_response = get_model(model_name).has_response
    return Records(x[None, :], np.array([y]) if has_response else None)


def report_of(
    model_name: str, records: Records, beta: np.ndarray, mechanism: Mechanism, sigma: float = 1.0
) -> np.ndarray:
    report = holder_round(
        model=get_model(model_name),
        beta=beta,
        records=records,
        sigma=sigma,
        mechanism=mechanism,
        rng=np.random.default_rng(0),
    )
    assert report.count == records.n
    assert report.total.shape == (records.d,)
    assert np.all(np.isfinite(report.total))
    return report.total


@pytest.mark.parametrize("mechanism", MECHANISMS, ids=repr)
@pytest.mark.parametrize("model_name", ["gmm", "mrm", "rmc"])
@pytest.mark.parametrize("value", EDGE_VALUES)
@pytest.mark.parametrize("beta_level", [0.5, 1e4, 1e300])
def test_any_record_value_gives_a_bounded_report(
    mechanism: Mechanism, model_name: str, value: float, beta_level: float
) -> None:
    # One record whose coordinates are (value, 1, −value): gradients huge, tiny, zero,
    # subnormal, NaN or ±inf; the report is sent, finite, and within the mechanism's bound.
    x = np.array([value, 1.0, -value])
    total = report_of(model_name, one_record(model_name, x), np.full(3, beta_level), mechanism)
    assert np.all(np.abs(total) <= mechanism.record_bound(3))


@pytest.mark.parametrize("mechanism", MECHANISMS, ids=repr)
def test_hostile_beta_cannot_make_a_condition_on_a_record_refuse(mechanism: Mechanism) -> None:
    # β₁ = 2.38e304 puts the MRM gradient x₁²β₁ just below the float range at x₁ = 86.9
    # and above it at 87.1: the coordinator would learn on which side a record lies.
    beta = np.array([2.38e304, 0.0, 0.0])
    below, above = (one_record("mrm", np.full(3, v)) for v in (86.9, 87.1))
    with np.errstate(all="ignore"):
        gradients = [get_model("mrm").gradients(beta, r, 1.0) for r in (below, above)]
    assert np.all(np.isfinite(gradients[0])) and not np.all(np.isfinite(gradients[1]))
    for records in (below, above):
        report_of("mrm", records, beta, mechanism)


@pytest.mark.parametrize("mechanism", MECHANISMS, ids=repr)
def test_tiny_sigma_and_a_zero_record_give_a_report(mechanism: Mechanism) -> None:
    # σ² underflows to 0 and ⟨β, y⟩/σ² is 0/0 for y = 0: the gradient is NaN.
    records = Records(np.array([[0.0, 0.0], [1.0, -2.0]]))
    with np.errstate(all="ignore"):
        gradients = get_model("gmm").gradients(np.ones(2), records, 1e-170)
    assert np.isnan(gradients[0]).all()
    total = report_of("gmm", records, np.ones(2), mechanism, sigma=1e-170)
    assert np.all(np.abs(total) <= 2 * mechanism.record_bound(2))


class NoGradients:
    """A model whose gradients must never be computed (the check comes first)."""

    name = "gmm"
    has_response = False

    def parameter_dim(self, d: int) -> int:
        return d

    def gradients(self, *args: object) -> np.ndarray:
        raise AssertionError("gradients were read before the public check")


@pytest.mark.parametrize(
    "mechanism",
    [
        LocalTruncation(scale=1e306, smoothing=2.0, noise_std=0.0),
        LocalClipped(clip=1.0, noise_std=1e306),
        CentralTruncation(scale=1e306, smoothing=2.0, noise_std=1e300),
    ],
    ids=repr,
)
def test_a_sum_that_could_overflow_is_refused_from_public_values(mechanism: Mechanism) -> None:
    with pytest.raises(ValueError, match="could overflow the float range"):
        holder_round(
            # Not a Model on purpose: its gradients raise, so the check must come first.
            model=NoGradients(),  # type: ignore[arg-type]
            beta=np.zeros(2),
            records=Records(np.zeros((1000, 2))),
            sigma=1.0,
            mechanism=mechanism,
            rng=np.random.default_rng(0),
        )
