"""Accounting: exact Gaussian-DP and the paper's zCDP conversion, cross-checked with
Google's dp-accounting."""

from __future__ import annotations

import math
from typing import Any

import dp_accounting
import pytest
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant

from ldpem.common.core.accounting import (
    epsilon_for_ratio,
    epsilon_spent,
    epsilon_tilde,
    gdp_delta,
    noise_std_for,
    ratio_for_budget,
    ratio_for_noise,
    zcdp_epsilon,
)


def pld_epsilon(noise_multiplier: float, count: int, delta: float) -> float:
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.GaussianDpEvent(noise_multiplier), count
    )
    accountant = PLDAccountant(value_discretization_interval=1e-3)
    return float(accountant.compose(event).get_epsilon(delta))


def rdp_epsilon(noise_multiplier: float, count: int, delta: float) -> float:
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.GaussianDpEvent(noise_multiplier), count
    )
    return float(RdpAccountant().compose(event).get_epsilon(delta))


@pytest.mark.parametrize("noise_multiplier", [0.8, 2.0, 5.0, 20.0])
@pytest.mark.parametrize("count", [1, 10, 30])
@pytest.mark.parametrize("delta", [1e-5, 1e-8])
def test_exact_matches_pld_accountant_within_one_percent(
    noise_multiplier: float, count: int, delta: float
) -> None:
    ours = epsilon_spent(
        sensitivity=1.0, noise_std=noise_multiplier, participations=count, delta=delta
    )
    assert ours == pytest.approx(pld_epsilon(noise_multiplier, count, delta), rel=0.01)


@pytest.mark.parametrize("noise_multiplier", [0.8, 2.0, 5.0, 20.0])
@pytest.mark.parametrize("count", [1, 10])
def test_paper_conversion_is_a_valid_upper_bound_on_rdp(
    noise_multiplier: float, count: int
) -> None:
    # zCDP → (ε, δ) via ρ + 2√(ρ log 1/δ) is looser than the RDP accountant's optimal
    # conversion, never tighter; and the exact (PLD) ε is the smallest of the three.
    delta = 1e-6
    paper = epsilon_spent(
        sensitivity=1.0,
        noise_std=noise_multiplier,
        participations=count,
        delta=delta,
        accounting="paper",
    )
    rdp = rdp_epsilon(noise_multiplier, count, delta)
    exact = epsilon_spent(
        sensitivity=1.0, noise_std=noise_multiplier, participations=count, delta=delta
    )
    assert paper >= rdp * (1 - 1e-9)
    assert exact <= rdp


@pytest.mark.parametrize("epsilon", [0.2, 0.5, 1.0, 4.0])
@pytest.mark.parametrize("delta", [1e-6, 1e-10])
@pytest.mark.parametrize("accounting", ["exact", "paper"])
@pytest.mark.parametrize("participations", [1, 10])
def test_calibration_round_trips(
    epsilon: float, delta: float, accounting: str, participations: int
) -> None:
    release: dict[str, Any] = {
        "sensitivity": 3.7,
        "participations": participations,
        "delta": delta,
        "accounting": accounting,
    }
    std = noise_std_for(epsilon=epsilon, **release)
    assert epsilon_spent(noise_std=std, **release) == pytest.approx(epsilon, rel=1e-9)


@pytest.mark.parametrize("epsilon", [0.2, 0.5, 1.0, 2.0, 4.0])
def test_exact_needs_less_noise_than_paper(epsilon: float) -> None:
    delta = 1e-6
    exact = noise_std_for(epsilon=epsilon, delta=delta, sensitivity=1.0)
    paper = noise_std_for(epsilon=epsilon, delta=delta, sensitivity=1.0, accounting="paper")
    # docs/MATH.md section 4, docs/PRIVACY.md: 15–28% less noise over ε ∈ [0.2, 4] at δ = 1e-6.
    saving = 1 - exact / paper
    assert 0.14 <= saving <= 0.29


def test_paper_calibration_is_rho_equals_eps_tilde_squared() -> None:
    # Algorithm 2: σ² = Δ²/(2ε̃²), i.e. ρ = ε̃², and ρ + 2√(ρ log 1/δ) = ε exactly.
    epsilon, delta = 1.0, 2e5**-1.1
    eps_t = epsilon_tilde(epsilon, delta)
    assert zcdp_epsilon(eps_t**2, delta) == pytest.approx(epsilon, rel=1e-12)
    std = noise_std_for(epsilon=epsilon, delta=delta, sensitivity=2.0, accounting="paper")
    assert std**2 == pytest.approx(4.0 / (2 * eps_t**2), rel=1e-12)


def test_epsilon_tilde_stable_for_tiny_epsilon() -> None:
    # The naive √(L+ε) − √L loses every digit at ε = 1e-12; the rationalised form does not.
    log_inv_delta = 30.0
    delta = math.exp(-log_inv_delta)
    assert epsilon_tilde(1e-12, delta) == pytest.approx(
        1e-12 / (2 * math.sqrt(log_inv_delta)), rel=1e-9
    )


def test_gdp_delta_is_the_tight_formula() -> None:
    mu, eps = 1.0, 0.5
    from scipy.stats import norm

    want = norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)
    assert gdp_delta(eps, mu) == pytest.approx(want, rel=1e-12)


def test_heterogeneous_participations_compose_in_quadrature() -> None:
    ratio = ratio_for_noise([1.0, 2.0], [2.0, 2.0])
    assert ratio == pytest.approx(math.sqrt(0.25 + 1.0))
    assert ratio_for_noise(1.0, 2.0, participations=4) == pytest.approx(1.0)


def test_budget_and_ratio_inverse() -> None:
    mu = ratio_for_budget(1.0, 1e-6)
    assert epsilon_for_ratio(mu, 1e-6) == pytest.approx(1.0, rel=1e-9)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"epsilon": -1.0, "delta": 1e-6, "sensitivity": 1.0},
            "epsilon must be a finite number > 0, got -1.0",
        ),
        (
            {"epsilon": 0.0, "delta": 1e-6, "sensitivity": 1.0},
            "epsilon must be a finite number > 0, got 0.0",
        ),
        ({"epsilon": 1.0, "delta": 1.0, "sensitivity": 1.0}, "delta must be in (0, 1), got 1.0"),
        ({"epsilon": 1.0, "delta": 0.0, "sensitivity": 1.0}, "delta must be in (0, 1), got 0.0"),
        (
            {"epsilon": 1.0, "delta": 1e-6, "sensitivity": 0.0},
            "sensitivity must be a finite number > 0, got 0.0",
        ),
        (
            {"epsilon": 1.0, "delta": 1e-6, "sensitivity": 1.0, "participations": 0},
            "participations must be an integer >= 1, got 0",
        ),
        (
            {"epsilon": 1.0, "delta": 1e-6, "sensitivity": 1.0, "accounting": "rdp"},
            "accounting must be one of ('exact', 'paper'), got 'rdp'",
        ),
    ],
)
def test_invalid_arguments_name_parameter_and_value(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as caught:
        noise_std_for(**kwargs)
    assert str(caught.value) == message
