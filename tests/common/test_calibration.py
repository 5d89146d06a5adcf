"""Calibration: the paper's s and β_s, the sensitivity, and the τ defaults."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from ldpem.common.core.accounting import epsilon_tilde
from ldpem.common.core.calibration import (
    central_scale,
    local_scale,
    round_epsilon_tilde,
    smoothing_precision,
    truncation_sensitivity,
)
from ldpem.common.models import get_model


def test_smoothing_precision_is_sqrt_log_d_over_zeta() -> None:
    assert smoothing_precision(10, 0.1) == pytest.approx(math.sqrt(math.log(100)))


def test_local_and_central_scales_follow_algorithm_2() -> None:
    eps_t = epsilon_tilde(1.0, 2e5**-1.1)
    log_term = math.log(10 / 0.1)
    local = local_scale(records=20_000, tau=1.9, eps_tilde=eps_t, d=10)
    central = central_scale(records=20_000, tau=1.9, eps_tilde=eps_t, d=10)
    assert local == pytest.approx(20_000**0.25 * math.sqrt(1.9 * eps_t) / (2 * log_term))
    assert central == pytest.approx(math.sqrt(20_000 * 1.9 * eps_t) / (2 * log_term))
    # The local scale grows like m^{1/4}, the central like m^{1/2}.
    assert local_scale(records=16 * 20_000, tau=1.9, eps_tilde=eps_t, d=10) == pytest.approx(
        2 * local
    )


def test_reuse_splits_the_zcdp_budget_evenly() -> None:
    eps_t = epsilon_tilde(1.0, 1e-6)
    assert round_epsilon_tilde(1.0, 1e-6, 4) == pytest.approx(eps_t / 2)
    # k rounds at ρ/k each compose back to ρ = ε̃².
    assert 4 * round_epsilon_tilde(1.0, 1e-6, 4) ** 2 == pytest.approx(eps_t**2)


def test_sensitivity_is_twice_the_bound_times_sqrt_d() -> None:
    assert truncation_sensitivity(1.5, 9, smoothing=2.0) == pytest.approx(
        2 * (2 * math.sqrt(2) / 3) * math.erf(1.0) * 1.5 * 3
    )


def test_default_tau_per_model() -> None:
    for name, tau in (("gmm", 1.9), ("mrm", 10.9), ("rmc", 10.9)):
        assert get_model(name).default_tau(beta_bound=3.0, sigma=1.0, d=10) == pytest.approx(tau)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: smoothing_precision(10, 1.5), "zeta must be in (0, 1), got 1.5"),
        (lambda: smoothing_precision(0, 0.1), "d must be an integer >= 1, got 0"),
        (
            lambda: local_scale(records=0, tau=1.0, eps_tilde=0.1, d=3),
            "records must be an integer >= 1, got 0",
        ),
        (
            lambda: central_scale(records=10, tau=-1.0, eps_tilde=0.1, d=3),
            "tau must be a finite number > 0, got -1.0",
        ),
        (lambda: get_model("lda"), "model must be one of"),
        (
            lambda: get_model("gmm").default_tau(beta_bound=-1.0, sigma=1.0, d=2),
            "beta_bound must be a finite number > 0, got -1.0",
        ),
        (
            lambda: truncation_sensitivity(0.0, 3, smoothing=1.0),
            "s must be a finite number > 0, got 0.0",
        ),
    ],
)
def test_validation(call: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError) as caught:
        call()
    assert message in str(caught.value)
