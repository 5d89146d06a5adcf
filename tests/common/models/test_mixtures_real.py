"""gmmk and lca without privacy on two public data sets, against published fits
(tests/data/README.md gives the data's sources and licences; docs/RESULTS.md, "K-component
models on public data", the private runs on the same data).

* gmmk on Fisher's iris (150 flowers, 4 measurements in cm), K = 3, σ the pooled
  within-species standard deviation: against the k-means fit of R's ``kmeans(iris[, 1:4],
  3)`` as Zhao, *R and Data Mining* (2012), prints it — clusters of 50, 62 and 38 flowers
  with centres (5.006, 3.428, 1.462, 0.246), (5.901613, 2.748387, 4.393548, 1.433871),
  (6.85, 3.073684, 5.742105, 2.071053). k-means is the σ → 0 limit of this model (hard
  assignments, weights the cluster shares); at σ = 0.39 cm the posteriors of flowers near
  a boundary are not 0 or 1, which moves a fitted mean away from the hard cluster mean.
  The tolerance is that move, bounded from the published fit and the data alone (not
  from the product's output): c_k the published centre, h_ik = 1 when flower i is in
  cluster k (nearest centre), w_ik its posterior at the published centres and shares,
  one EM step moves c_k by Σ_i (w_ik − h_ik)(y_i − c_k)/Σ_i w_ik (c_k being the mean of
  its cluster), of norm at most b_k = Σ_i |w_ik − h_ik| ‖y_i − c_k‖ / Σ_i w_ik; the fixed
  point is allowed 2·b_k, plus the rounding of the printed centres (half a unit of their
  last digit in each of the 4 coordinates). The same for the weights: the shares move by
  at most Σ_i |w_ik − h_ik| / n in one step, allowed twice that plus 1/(2n).
* lca on the Stouffer–Toby role-conflict data (216 respondents, 4 binary items), K = 2:
  poLCA's documentation of its ``values`` data gives the maximum log-likelihood of the
  two-class model, −504.4677 (the model of Goodman 1974; 2002, Table 5b). The fit's
  log-likelihood, written here from the model's definition, must lie within the rounding
  of that figure (5·10⁻⁵) above it, and at most 10⁻⁴ below it (the rounding plus as
  much again for what gradient EM has left after its rounds).
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
from scipy.special import logsumexp

from ldpem.common.models import Records
from ldpem.common.planning.study import Dataset, Study, run_study

DATA = Path(__file__).resolve().parents[2] / "data"
MEASUREMENTS = ("sepal_length", "sepal_width", "petal_length", "petal_width")

#: Zhao (2012), R's kmeans(iris[, 1:4], 3): the cluster centres (cm) and sizes.
KMEANS_CENTRES = np.array(
    [
        [5.006, 3.428, 1.462, 0.246],
        [5.901613, 2.748387, 4.393548, 1.433871],
        [6.85, 3.073684, 5.742105, 2.071053],
    ]
)
KMEANS_SIZES = np.array([50, 62, 38])
#: Half a unit of the last printed digit of each centre (the first is printed to 3 decimals).
CENTRE_ROUNDING = np.array([5e-4, 5e-7, 5e-7]) * np.sqrt(4)
#: poLCA, ``values`` data: log-likelihood of the two-class model, printed to 4 decimals.
STOUFFER_TOBY_LOGLIK = -504.4677
LOGLIK_ROUNDING = 5e-5


def iris() -> tuple[np.ndarray, np.ndarray]:
    """The 150 × 4 measurements and the 150 species names."""
    with (DATA / "iris.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    y = np.array([[float(row[name]) for name in MEASUREMENTS] for row in rows])
    return y, np.array([row["species"] for row in rows])


def pooled_sigma(y: np.ndarray, species: np.ndarray) -> float:
    """The shared isotropic σ: √ of the pooled within-species variance, averaged over the
    4 measurements (n − 3 degrees of freedom)."""
    groups = np.unique(species)
    squares = sum(((y[species == s] - y[species == s].mean(axis=0)) ** 2).sum() for s in groups)
    return float(np.sqrt(squares / ((y.shape[0] - len(groups)) * y.shape[1])))


def soft_hard_bounds(y: np.ndarray, sigma: float) -> tuple[np.ndarray, np.ndarray]:
    """b_k for the means and for the shares (module docstring), from the published fit."""
    distances = np.linalg.norm(y[:, None, :] - KMEANS_CENTRES[None, :, :], axis=2)
    hard = np.eye(3)[distances.argmin(axis=1)]
    assert np.array_equal(hard.sum(axis=0), KMEANS_SIZES), "not the published clusters"
    log_joint = np.log(KMEANS_SIZES / y.shape[0]) - distances**2 / (2 * sigma**2)
    soft = np.exp(log_joint - logsumexp(log_joint, axis=1, keepdims=True))
    gap = np.abs(soft - hard)
    return (gap * distances).sum(axis=0) / soft.sum(axis=0), gap.sum(axis=0) / y.shape[0]


def test_gmmk_on_iris_is_the_published_kmeans_fit_within_the_soft_assignment_bound() -> None:
    y, species = iris()
    sigma = pooled_sigma(y, species)
    centre = y.mean(axis=0)  # the model assumes records centred near 0 (docs/MATH.md §7)
    study = Study(
        model="gmmk",
        mechanism="none",
        rounds=150,  # a study needs n >= rounds
        reuse=True,
        hospitals=1,
        sigma=sigma,
        seed=0,
        model_options=(("components", 3),),
    )
    estimate = run_study(study, data=Dataset(Records(y - centre))).estimate
    means = estimate[:12].reshape(3, 4) + centre
    logits = estimate[12:]
    shares = np.exp(logits - logsumexp(logits))
    # Components have no order: match each to the published centre nearest to it.
    order = [int(np.argmin(np.linalg.norm(KMEANS_CENTRES - mean, axis=1))) for mean in means]
    assert sorted(order) == [0, 1, 2]
    fitted_means = np.empty_like(means)
    fitted_shares = np.empty(3)
    fitted_means[order] = means
    fitted_shares[order] = shares
    mean_bound, share_bound = soft_hard_bounds(y, sigma)
    moved = np.linalg.norm(fitted_means - KMEANS_CENTRES, axis=1)
    assert np.all(moved <= 2 * mean_bound + CENTRE_ROUNDING), (moved, mean_bound)
    share_moved = np.abs(fitted_shares - KMEANS_SIZES / y.shape[0])
    assert np.all(share_moved <= 2 * share_bound + 0.5 / y.shape[0]), (share_moved, share_bound)


def lca_loglik(beta: np.ndarray, x: np.ndarray, k: int) -> float:
    """Σ_i log Σ_k π_k Π_j p_kj^x_ij (1 − p_kj)^(1 − x_ij), β = (θ_1 … θ_K, α)."""
    d = x.shape[1]
    items = beta[: k * d].reshape(k, d)
    log_pi = beta[k * d :] - logsumexp(beta[k * d :])
    log_p, log_q = -np.logaddexp(0.0, -items), -np.logaddexp(0.0, items)
    joint = x @ log_p.T + (1.0 - x) @ log_q.T + log_pi
    return float(logsumexp(joint, axis=1).sum())


def test_lca_on_stouffer_toby_reaches_the_published_log_likelihood() -> None:
    x = np.loadtxt(DATA / "stouffer_toby.csv", delimiter=",", skiprows=1)
    assert x.shape == (216, 4)
    # A study needs n >= rounds; ten copies of every record leave each round's mean
    # gradient, so every iterate, as they are on the 216 records.
    copies = np.repeat(x, 10, axis=0)
    study = Study(
        model="lca",
        mechanism="none",
        rounds=2000,
        reuse=True,
        hospitals=1,
        seed=0,
        model_options=(("components", 2),),
    )
    estimate = run_study(study, data=Dataset(Records(copies))).estimate
    loglik = lca_loglik(estimate, x, 2)
    assert loglik <= STOUFFER_TOBY_LOGLIK + LOGLIK_ROUNDING
    assert loglik >= STOUFFER_TOBY_LOGLIK - 2 * LOGLIK_ROUNDING
