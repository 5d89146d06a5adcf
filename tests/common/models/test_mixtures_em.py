"""With ``--mechanism none`` the product's estimate of gmmk and lca is an independent EM's
(written here from the models' definitions, nothing imported from the product's models):

* iterate by iterate, the full-batch gradient EM β ← β + η·mean_i P∇log p_β(record i),
  P the preconditioner docs/MATH.md §7 states (σ² on means, 4 on item logits, 2 on weight
  logits), with the likelihood written component by component;
* at convergence, the classic EM (closed-form M-step: weighted means or endorsement
  rates, mean posterior weights) from the same start: the same maximum likelihood
  estimate, to 1e-6.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment
from scipy.special import expit, logsumexp
from scipy.stats import norm

from ldpem.common.models import Records, get_model
from ldpem.common.planning.study import Dataset, Study, StudyResult, run_study

SIGMA = 0.8


def product_run(
    name: str, records: Records, k: int, *, rounds: int, eta: float = 1.0
) -> StudyResult:
    """The product's full-batch run without privacy: one hospital, every record in every
    round (``reuse``), η = ``eta``, from the model's own start."""
    study = Study(
        model=name,
        mechanism="none",
        rounds=rounds,
        reuse=True,
        hospitals=1,
        sigma=SIGMA,
        eta=eta,
        seed=4,
        model_options=(("components", k),),
    )
    return run_study(study, data=Dataset(records))


# --- gmmk ------------------------------------------------------------------------------


def gmmk_posteriors(y: np.ndarray, means: np.ndarray, log_pi: np.ndarray) -> np.ndarray:
    """w_ik ∝ π_k N(y_i; μ_k, σ²I), from scipy's normal log-density."""
    k = means.shape[0]
    log_joint = np.column_stack(
        [log_pi[c] + norm.logpdf(y, loc=means[c], scale=SIGMA).sum(axis=1) for c in range(k)]
    )
    weights: np.ndarray = np.exp(log_joint - logsumexp(log_joint, axis=1, keepdims=True))
    return weights


def gmmk_gradient_em(
    y: np.ndarray, beta0: np.ndarray, k: int, rounds: int, eta: float
) -> list[np.ndarray]:
    """Full-batch gradient EM: the score of the log-likelihood, σ² on the means and 2 on
    the weight logits, averaged over the records, one step of η per round."""
    n, d = y.shape
    beta = beta0.copy()
    path = [beta.copy()]
    for _ in range(rounds):
        means, alpha = beta[: k * d].reshape(k, d), beta[k * d :]
        log_pi = alpha - logsumexp(alpha)
        w = gmmk_posteriors(y, means, log_pi)
        score_means = np.stack([(w[:, [c]] * (y - means[c]) / SIGMA**2).sum(0) for c in range(k)])
        score_alpha = (w - np.exp(log_pi)).sum(0)
        step = np.r_[SIGMA**2 * score_means.ravel(), 2.0 * score_alpha] / n
        beta = beta + eta * step
        path.append(beta.copy())
    return path


def em_to_convergence(
    step: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]],
    components: np.ndarray,
    pi: np.ndarray,
    *,
    tolerance: float,
    most: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Classic EM's steps ``(components (K, d), π (K,)) -> (components, π)`` from the
    given ones until no value moves by ``tolerance`` or more (at most ``most`` steps)."""
    for _ in range(most):
        new_components, new_pi = step(components, pi)
        change = max(np.abs(new_components - components).max(), np.abs(new_pi - pi).max())
        components, pi = new_components, new_pi
        if change < tolerance:
            break
    return components, pi


def gmmk_classic_em(y: np.ndarray, beta0: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """EM with the closed-form M-step, to convergence: (means (K, d), weights (K,))."""
    d = y.shape[1]
    means = beta0[: k * d].reshape(k, d).copy()
    alpha = beta0[k * d :]
    pi = np.exp(alpha - logsumexp(alpha))

    def step(means: np.ndarray, pi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        w = gmmk_posteriors(y, means, np.log(pi))
        return (w.T @ y) / w.sum(0)[:, None], w.mean(0)

    return em_to_convergence(step, means, pi, tolerance=1e-13, most=5000)


def gmmk_data(k: int, d: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Well-separated synthetic data drawn here (not by the product): means 3σ apart."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((k, d))
    centres *= 3.0 * SIGMA / np.linalg.norm(centres, axis=1, keepdims=True)
    weights = rng.dirichlet(np.full(k, 5.0))
    labels = rng.choice(k, size=n, p=weights)
    return centres[labels] + SIGMA * rng.standard_normal((n, d)), centres


@pytest.mark.parametrize(("k", "d", "eta"), [(3, 5, 1.0), (2, 2, 0.6), (4, 3, 1.0)])
def test_gmmk_iterates_are_full_batch_gradient_em(k: int, d: int, eta: float) -> None:
    y, _ = gmmk_data(k, d, 3000, seed=31 + k)
    result = product_run("gmmk", Records(y), k, rounds=15, eta=eta)
    expected = gmmk_gradient_em(y, np.array(result.betas[0]), k, 15, eta)
    np.testing.assert_allclose(result.betas, np.array(expected), rtol=0, atol=1e-9)


@pytest.mark.parametrize(("k", "d", "seed"), [(3, 5, 41), (2, 3, 42), (4, 4, 43)])
def test_gmmk_converges_to_classic_em(k: int, d: int, seed: int) -> None:
    y, _ = gmmk_data(k, d, 4000, seed=seed)
    result = product_run("gmmk", Records(y), k, rounds=600)
    means, pi = gmmk_classic_em(y, np.array(result.betas[0]), k)
    beta = np.array(result.beta)
    got_means, alpha = beta[: k * d].reshape(k, d), beta[k * d :]
    got_pi = np.exp(alpha - logsumexp(alpha))
    rows, cols = linear_sum_assignment(((got_means[:, None] - means[None]) ** 2).sum(2))
    np.testing.assert_allclose(got_means[rows], means[cols], rtol=0, atol=1e-6)
    np.testing.assert_allclose(got_pi[rows], pi[cols], rtol=0, atol=1e-6)


# --- lca -------------------------------------------------------------------------------


def lca_posteriors(x: np.ndarray, p: np.ndarray, log_pi: np.ndarray) -> np.ndarray:
    """w_ik ∝ π_k Π_{j observed} p_kj^x (1 − p_kj)^(1 − x): a missing item (NaN) is left
    out of the product, as poLCA does."""
    observed = ~np.isnan(x)
    k = p.shape[0]
    log_joint = np.empty((x.shape[0], k))
    for c in range(k):
        per_item = np.where(x == 1.0, np.log(p[c]), np.log1p(-p[c]))
        log_joint[:, c] = log_pi[c] + np.where(observed, per_item, 0.0).sum(axis=1)
    weights: np.ndarray = np.exp(log_joint - logsumexp(log_joint, axis=1, keepdims=True))
    return weights


def lca_gradient_em(
    x: np.ndarray, beta0: np.ndarray, k: int, rounds: int, eta: float
) -> list[np.ndarray]:
    """Full-batch gradient EM on the item logits θ (p = sigmoid θ) and class logits α:
    the score, 4 on the items and 2 on the classes, averaged, one step of η per round."""
    n, d = x.shape
    observed = ~np.isnan(x)
    answers = np.nan_to_num(x)
    beta = beta0.copy()
    path = [beta.copy()]
    for _ in range(rounds):
        theta, alpha = beta[: k * d].reshape(k, d), beta[k * d :]
        log_pi = alpha - logsumexp(alpha)
        p = expit(theta)
        w = lca_posteriors(x, p, log_pi)
        score_items = np.stack([(w[:, [c]] * observed * (answers - p[c])).sum(0) for c in range(k)])
        score_alpha = (w - np.exp(log_pi)).sum(0)
        beta = beta + eta * np.r_[4.0 * score_items.ravel(), 2.0 * score_alpha] / n
        path.append(beta.copy())
    return path


def lca_classic_em(x: np.ndarray, beta0: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """poLCA's EM to convergence: p_kj = Σ_i w_ik x_ij / Σ_i w_ik over the records that
    answer item j, π_k = mean w_ik. Returns (p (K, d), π (K,))."""
    d = x.shape[1]
    observed = ~np.isnan(x)
    answers = np.nan_to_num(x)
    p = expit(beta0[: k * d].reshape(k, d))
    alpha = beta0[k * d :]
    pi = np.exp(alpha - logsumexp(alpha))

    def step(p: np.ndarray, pi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        w = lca_posteriors(x, p, np.log(pi))
        return (w.T @ answers) / (w.T @ observed), w.mean(0)

    return em_to_convergence(step, p, pi, tolerance=1e-14, most=20000)


def lca_data(k: int, d: int, n: int, seed: int, missing: float) -> np.ndarray:
    """Well-separated classes drawn here: each class endorses its own items w.p. 0.85,
    the others w.p. 0.15; each item missing w.p. ``missing``."""
    rng = np.random.default_rng(seed)
    p = np.where(np.arange(d)[None, :] % k == np.arange(k)[:, None], 0.85, 0.15)
    labels = rng.choice(k, size=n, p=rng.dirichlet(np.full(k, 5.0)))
    x = (rng.random((n, d)) < p[labels]).astype(float)
    x[rng.random((n, d)) < missing] = np.nan
    return x


@pytest.mark.parametrize(("k", "d", "eta"), [(3, 6, 1.0), (2, 5, 0.5)])
def test_lca_iterates_are_full_batch_gradient_em(k: int, d: int, eta: float) -> None:
    x = lca_data(k, d, 3000, seed=51 + k, missing=0.15)
    result = product_run("lca", Records(x), k, rounds=15, eta=eta)
    expected = lca_gradient_em(x, np.array(result.betas[0]), k, 15, eta)
    np.testing.assert_allclose(result.betas, np.array(expected), rtol=0, atol=1e-9)


@pytest.mark.parametrize(("k", "d", "seed"), [(3, 8, 61), (2, 5, 62)])
def test_lca_converges_to_poLCA_em(k: int, d: int, seed: int) -> None:
    x = lca_data(k, d, 4000, seed=seed, missing=0.1)
    result = product_run("lca", Records(x), k, rounds=1500)
    p, pi = lca_classic_em(x, np.array(result.betas[0]), k)
    beta = np.array(result.beta)
    got_p = expit(beta[: k * d].reshape(k, d))
    alpha = beta[k * d :]
    got_pi = np.exp(alpha - logsumexp(alpha))
    rows, cols = linear_sum_assignment(((got_p[:, None] - p[None]) ** 2).sum(2))
    np.testing.assert_allclose(got_p[rows], p[cols], rtol=0, atol=1e-6)
    np.testing.assert_allclose(got_pi[rows], pi[cols], rtol=0, atol=1e-6)


def test_the_models_are_the_registered_ones() -> None:
    # What the runs above exercised: the registered models with K set.
    assert get_model("gmmk", {"components": 4}).parameter_dim(3) == 16
    assert get_model("lca", {"components": 2}).parameter_dim(5) == 12
