"""The in-process gradient EM loop: partitioning, holders, central noise."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from ldpem.common.configure import make_mechanism
from ldpem.common.mechanisms import NoPrivacy
from ldpem.common.models import Records, get_model
from ldpem.common.simulation import round_groups, run_gradient_em


def test_partition_is_disjoint_and_covers_every_record() -> None:
    records = Records(np.arange(103.0)[:, None])
    groups = round_groups(records, 10, reuse=False, rng=np.random.default_rng(0))
    seen = np.concatenate([g.x[:, 0] for g in groups])
    assert sorted(seen.tolist()) == list(range(103))
    assert {len(g) for g in groups} == {10, 11}


def test_reuse_gives_every_record_every_round() -> None:
    records = Records(np.arange(5.0)[:, None])
    groups = round_groups(records, 3, reuse=True, rng=np.random.default_rng(0))
    assert all(g is records for g in groups)


def test_too_few_records_for_the_rounds() -> None:
    with pytest.raises(ValueError, match="a holder with 4 records cannot be split over 5 rounds"):
        round_groups(Records(np.zeros((4, 2))), 5, reuse=False, rng=np.random.default_rng(0))


def test_split_holders_match_one_holder_without_noise() -> None:
    # With no noise and reuse, the M-step depends only on the pooled mean gradient.
    model = get_model("gmm")
    rng = np.random.default_rng(1)
    records, _beta_star = model.generate(3000, 4, rng=rng)
    beta0 = rng.standard_normal(4)
    common: dict[str, Any] = {
        "model": model,
        "sigma": 1.0,
        "mechanism": NoPrivacy(),
        "rounds": 5,
        "beta0": beta0,
        "reuse": True,
    }
    pooled = run_gradient_em(holders=[records], rng=np.random.default_rng(2), **common)
    parts = [
        records.take(slice(0, 400)),
        records.take(slice(400, 1700)),
        records.take(slice(1700, None)),
    ]
    split = run_gradient_em(holders=parts, rng=np.random.default_rng(2), **common)
    np.testing.assert_allclose(split.beta, pooled.beta, rtol=1e-10)
    assert len(pooled.betas) == 6


def test_private_run_records_errors_and_calls_back() -> None:
    model = get_model("gmm")
    rng = np.random.default_rng(3)
    records, beta_star = model.generate(100_000, 5, rng=rng)
    mech = make_mechanism(
        "central", d=5, records_per_round=10_000, epsilon=1.0, delta=1e-6, tau=1.0 + 9 / 5
    )
    seen: list[int] = []
    result = run_gradient_em(
        model=model,
        holders=[records],
        sigma=1.0,
        mechanism=mech,
        rounds=10,
        beta0=rng.standard_normal(5) * 3 / math.sqrt(5),
        rng=rng,
        beta_star=beta_star,
        on_round=lambda t, beta: seen.append(t),
    )
    assert seen == list(range(1, 11))
    assert len(result.errors) == 10
    # Central noise on the average has norm ≈ σ√d; the final error is of that order plus
    # the statistical error √(d/m), far below the trivial error ‖β*‖ = 3.
    floor = mech.noise_std * math.sqrt(5) + math.sqrt(5 / 10_000)
    assert result.errors[-1] < 5 * floor
    assert result.errors[-1] < 0.1 * 3.0
