"""Dropouts in the simulator: a holder misses a round; a round with fewer reports than the
mechanism's honest holders (t_min for noise shares) is not released."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ldpem.common.mechanisms import SecAggSkellam
from ldpem.common.models import Records, get_model
from ldpem.common.planning.simulator import EMResult, every_round, run_gradient_em
from ldpem.common.protocol import make_mechanism

MODEL = get_model("gmm")


def holders(count: int, size: int, d: int = 3) -> list[Records]:
    rng = np.random.default_rng(1)
    records, _ = MODEL.generate(count * size, d, rng=rng)
    return [records.take(slice(k * size, (k + 1) * size)) for k in range(count)]


def run(t_min: int, dropout: float, seed: int = 0, count: int = 6) -> EMResult:
    mechanism = make_mechanism(
        "secagg", d=3, records_per_round=count * 50, epsilon=1.0, delta=1e-6, tau=10.0, t_min=t_min
    )
    return run_gradient_em(
        model=MODEL,
        holders=holders(count, 500),
        sigma=1.0,
        mechanisms=every_round([mechanism] * count, 10),
        beta0=np.ones(3),
        rng=np.random.default_rng(seed),
        dropout=dropout,
        dropout_rng=np.random.default_rng(seed + 100),
    )


def test_without_dropout_every_holder_reports_every_round() -> None:
    result = run(t_min=3, dropout=0.0)
    assert result.reporters == [6] * 10 and result.skipped == []


def test_rounds_short_of_t_min_are_not_released() -> None:
    result = run(t_min=5, dropout=0.4)
    assert len(result.reporters) == 10
    assert result.skipped == [t for t, r in enumerate(result.reporters) if r < 5]
    assert result.skipped and len(result.skipped) < 10  # this seed has both kinds
    for t in range(10):
        unchanged = np.array_equal(result.betas[t + 1], result.betas[t])
        assert unchanged == (t in result.skipped)


def test_the_survivors_noise_reaches_the_target() -> None:
    """With h ≥ t_min survivors the sum carries h shares, Sk(h·λ_s) with h·λ_s ≥ λ: at
    least the calibrated noise, whoever dropped out."""
    mechanism = make_mechanism(
        "secagg", d=3, records_per_round=300, epsilon=1.0, delta=1e-6, tau=10.0, t_min=4
    )
    assert isinstance(mechanism, SecAggSkellam)
    for survivors in (4, 5, 6):
        assert mechanism.epsilon(3, delta=1e-6, honest=survivors) <= 1.0


def test_the_same_seed_gives_the_same_run_and_dropout_needs_its_generator() -> None:
    first, second = run(t_min=2, dropout=0.2, seed=3), run(t_min=2, dropout=0.2, seed=3)
    assert all(np.array_equal(a, b) for a, b in zip(first.betas, second.betas, strict=True))
    mechanism = make_mechanism(
        "local", d=3, records_per_round=300, epsilon=1.0, delta=1e-6, tau=10.0
    )
    common: dict[str, Any] = {
        "model": MODEL,
        "holders": holders(2, 100),
        "sigma": 1.0,
        "mechanisms": every_round([mechanism] * 2, 2),
        "beta0": np.ones(3),
        "rng": np.random.default_rng(0),
    }
    with pytest.raises(ValueError, match="dropout needs a dropout_rng"):
        run_gradient_em(**common, dropout=0.1)
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\), got 1\.0"):
        run_gradient_em(**common, dropout=1.0, dropout_rng=np.random.default_rng(0))
