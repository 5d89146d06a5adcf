"""The in-process gradient EM loop: partitioning, holders, central noise."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from ldpem.common.mechanisms import NoPrivacy
from ldpem.common.models import Records, get_model
from ldpem.common.planning.simulator import every_round, round_groups, run_gradient_em
from ldpem.common.protocol import central_noise_for, make_mechanism


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
        "beta0": beta0,
        "reuse": True,
    }
    pooled = run_gradient_em(
        holders=[records],
        mechanisms=every_round([NoPrivacy()], 5),
        rng=np.random.default_rng(2),
        **common,
    )
    parts = [
        records.take(slice(0, 400)),
        records.take(slice(400, 1700)),
        records.take(slice(1700, None)),
    ]
    split = run_gradient_em(
        holders=parts,
        mechanisms=every_round([NoPrivacy()] * 3, 5),
        rng=np.random.default_rng(2),
        **common,
    )
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
        mechanisms=every_round([mech], 10, central_noise_for(mech, d=5, epsilon=1.0, delta=1e-6)),
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


def test_a_central_mechanism_needs_its_aggregator_noise() -> None:
    mech = make_mechanism("central", d=2, records_per_round=10, epsilon=1.0, delta=1e-6, tau=1.0)
    with pytest.raises(ValueError, match="give its noise as the round's central"):
        run_gradient_em(
            model=get_model("gmm"),
            holders=[Records(np.zeros((20, 2)))],
            sigma=1.0,
            mechanisms=every_round([mech], 2),
            beta0=np.ones(2),
            rng=np.random.default_rng(0),
        )


def test_central_noise_is_calibrated_on_the_rounds_count() -> None:
    # 103 records over 10 rounds: rounds of 11 and 10 records. The noise of a round is that
    # of the average of ITS records (sensitivity Δ/count), never of the nominal m = 10.
    mech = make_mechanism("central", d=2, records_per_round=10, epsilon=1.0, delta=1e-6, tau=1.0)
    central = central_noise_for(mech, d=2, epsilon=1.0, delta=1e-6)
    assert central is not None
    assert central.std(10) == mech.noise_std
    assert central.std(11) == pytest.approx(mech.noise_std * 10 / 11, rel=1e-12)
    assert central.std(5) == pytest.approx(2 * mech.noise_std, rel=1e-12)
