"""The paper's three models: gradient formulas (finite differences), mean gradient at β*,
and noiseless gradient EM recovering β* (the K-component ones: test_mixtures.py)."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import numpy as np
import pytest
from scipy.special import logsumexp

from ldpem.common.mechanisms import NoPrivacy
from ldpem.common.models import Records, get_model
from ldpem.common.planning.simulator import every_round, run_gradient_em

SIGMA = 1.3  # σ ≠ 1 so that a misplaced σ² in a formula shows up
#: The paper's models, whose β has the records' dimension d (Model.parameter_dim).
PAPER_MODELS = ("gmm", "mrm", "rmc")


def finite_difference(
    f: Callable[[np.ndarray], float], beta: np.ndarray, h: float = 1e-6
) -> np.ndarray:
    grad = np.empty_like(beta)
    for j in range(beta.size):
        step = np.zeros_like(beta)
        step[j] = h
        grad[j] = (f(beta + step) - f(beta - step)) / (2 * h)
    return grad


def mixture_log_likelihood(beta: np.ndarray, records: Records, i: int, model: str) -> float:
    """log p_β of record i for the symmetric mixtures (GMM, MRM), up to a constant."""
    if model == "gmm":
        y = records.x[i]
        plus = -np.sum((y - beta) ** 2) / (2 * SIGMA**2)
        minus = -np.sum((y + beta) ** 2) / (2 * SIGMA**2)
    else:
        assert records.y is not None
        x, y = records.x[i], records.y[i]
        plus = -((y - x @ beta) ** 2) / (2 * SIGMA**2)
        minus = -((y + x @ beta) ** 2) / (2 * SIGMA**2)
    return float(logsumexp([plus, minus]))


@pytest.mark.parametrize("model", ["gmm", "mrm"])
def test_mixture_gradient_is_sigma_squared_times_score(model: str) -> None:
    # Fisher's identity: ∇_β q(β; β) = ∇_β log p_β(y). The models return σ²·∇q (the paper's
    # normalisation, step size η = 1). This catches the paper's halved tanh argument.
    spec = get_model(model)
    rng = np.random.default_rng(11)
    records, beta_star = spec.generate(6, 4, snr=3.0, sigma=SIGMA, rng=rng)
    beta = beta_star + 0.4 * rng.standard_normal(4)
    grads = spec.gradients(beta, records, SIGMA)
    for i in range(records.n):
        log_p = partial(mixture_log_likelihood, records=records, i=i, model=model)
        score = finite_difference(log_p, beta)
        np.testing.assert_allclose(grads[i], SIGMA**2 * score, rtol=1e-6, atol=1e-7)


def rmc_surrogate(beta: np.ndarray, beta_prime: np.ndarray, x: np.ndarray, y: float) -> float:
    """q(β; β') = y⟨m, β⟩ − ½ βᵀ K β with m, K of MATH (1.4), (1.5) at β', K built in full."""
    z = ~np.isnan(x)
    xo = np.where(z, x, 0.0)
    u = np.where(z, 0.0, beta_prime)
    m = xo + (y - beta_prime @ xo) / (SIGMA**2 + u @ u) * u
    mm = np.where(z, 0.0, m)
    k = np.diag((~z).astype(float)) + np.outer(m, m) - np.outer(mm, mm)
    return float(y * (m @ beta) - 0.5 * beta @ k @ beta)


def test_rmc_gradient_matches_the_papers_k_matrix_by_finite_differences() -> None:
    spec = get_model("rmc")
    rng = np.random.default_rng(12)
    records, beta_star = spec.generate(8, 5, snr=2.0, sigma=SIGMA, missing=0.4, rng=rng)
    assert records.y is not None
    assert np.isnan(records.x).any()
    beta = beta_star + 0.3 * rng.standard_normal(5)
    grads = spec.gradients(beta, records, SIGMA)
    for i in range(records.n):
        x, y = records.x[i], float(records.y[i])
        numeric = finite_difference(partial(rmc_surrogate, beta_prime=beta, x=x, y=y), beta)
        np.testing.assert_allclose(grads[i], numeric, rtol=1e-6, atol=1e-6)


def test_rmc_without_missing_values_is_least_squares() -> None:
    spec = get_model("rmc")
    rng = np.random.default_rng(13)
    records, _beta_star = spec.generate(50, 3, snr=2.0, sigma=1.0, missing=0.0, rng=rng)
    assert records.y is not None
    beta = rng.standard_normal(3)
    expected = (records.y - records.x @ beta)[:, None] * records.x
    np.testing.assert_allclose(spec.gradients(beta, records, 1.0), expected, atol=1e-12)


def assert_mean_gradient_near_zero(model: str, *, n: int, d: int, seed: int) -> np.ndarray:
    """Asserts E ∇q(β*; β*) = 0 on ``n`` records of ``model`` in dimension ``d`` (SNR 3):
    each coordinate's mean within 5 standard errors of zero; returns those errors, (p,)."""
    spec = get_model(model)
    records, beta_star = spec.generate(n, d, snr=3.0, sigma=1.0, rng=np.random.default_rng(seed))
    grads = spec.gradients(beta_star, records, 1.0)
    standard_error: np.ndarray = grads.std(axis=0) / math.sqrt(n)
    assert np.all(np.abs(grads.mean(axis=0)) < 5 * standard_error)
    return standard_error


@pytest.mark.parametrize("model", PAPER_MODELS)
def test_mean_gradient_at_truth_is_near_zero(model: str) -> None:
    # Self-consistency: E ∇q(β*; β*) = 0. With n records each coordinate's mean is within
    # 5 standard errors (measured from the same sample) of zero.
    standard_error = assert_mean_gradient_near_zero(model, n=400_000, d=10, seed=14)
    assert np.all(standard_error < 5e-3)


@pytest.mark.parametrize("model", PAPER_MODELS)
def test_noiseless_gradient_em_recovers_truth(model: str) -> None:
    # d = 10, SNR 3, n = 2·10⁵: the MLE's error is O(σ√(d/n)) ≈ 0.007; 0.02 leaves ~3×.
    spec = get_model(model)
    rng = np.random.default_rng(15)
    records, beta_star = spec.generate(200_000, 10, snr=3.0, sigma=1.0, rng=rng)
    beta0 = rng.standard_normal(10) * 3.0 / math.sqrt(10)
    result = run_gradient_em(
        model=spec,
        holders=[records],
        sigma=1.0,
        mechanisms=every_round([NoPrivacy()], 30),
        beta0=beta0,
        rng=rng,
        reuse=True,
        beta_star=beta_star,
    )
    assert result.errors[-1] < 0.02
    assert result.errors[-1] < 0.1 * spec.error(beta0, beta_star)


@pytest.mark.parametrize("model", PAPER_MODELS)
def test_generators_are_seeded_and_scaled(model: str) -> None:
    spec = get_model(model)
    a, star_a = spec.generate(100, 6, snr=2.5, sigma=0.7, rng=np.random.default_rng(3))
    b, star_b = spec.generate(100, 6, snr=2.5, sigma=0.7, rng=np.random.default_rng(3))
    np.testing.assert_array_equal(a.x, b.x)
    np.testing.assert_array_equal(star_a, star_b)
    assert np.linalg.norm(star_a) == pytest.approx(2.5 * 0.7)


def test_rmc_missing_probability() -> None:
    records, _ = get_model("rmc").generate(
        20_000, 10, snr=1.0, sigma=1.0, missing=0.3, rng=np.random.default_rng(4)
    )
    # Binomial(2·10⁵, 0.3): 5 standard deviations is ±0.005.
    assert abs(np.isnan(records.x).mean() - 0.3) < 0.005


def test_error_metric_is_sign_invariant_only_for_mixtures() -> None:
    beta_star = np.array([1.0, -2.0])
    assert get_model("gmm").error(-beta_star, beta_star) == 0.0
    assert get_model("mrm").error(-beta_star, beta_star) == 0.0
    assert get_model("rmc").error(-beta_star, beta_star) == pytest.approx(2 * math.sqrt(5))


@pytest.mark.parametrize(
    ("model", "kwargs", "message"),
    [
        ("gmm", {"missing": 0.2}, "missing must be 0 for model gmm, got 0.2"),
        ("rmc", {"missing": 1.0}, r"missing must be in \[0, 1\), got 1.0"),
        ("mrm", {"sigma": 0.0}, "sigma must be a finite number > 0, got 0.0"),
        ("gmm", {"snr": -1.0}, "snr must be a finite number > 0, got -1.0"),
    ],
)
def test_generator_validation(model: str, kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        get_model(model).generate(10, 3, rng=np.random.default_rng(0), **kwargs)


def test_unknown_model() -> None:
    # The built-in five first; a model another test registered may follow them.
    built_in = r"\('gmm', 'gmmk', 'lca', 'mrm', 'rmc'"
    with pytest.raises(ValueError, match=rf"model must be one of {built_in}.*got 'lda'"):
        get_model("lda")
