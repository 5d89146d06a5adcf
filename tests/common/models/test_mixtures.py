"""The K-component models, gmmk and lca (docs/MATH.md §7): gradients against an independent
log-likelihood (finite differences), the mean gradient at β*, the generators' separation,
the error up to a relabelling, the declared option K, and every mechanism through
``ldpem simulate``. Their agreement with an independent EM is test_mixtures_em.py."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np
import pytest
from scipy.special import expit, logsumexp
from scipy.stats import norm

from ldpem.cli import main
from ldpem.common.mechanisms import mechanism_names
from ldpem.common.models import Model, Records, get_model
from ldpem.common.planning.study import Study, run_study
from tests.common.models.test_models import assert_mean_gradient_near_zero, finite_difference

MIXTURES = ("gmmk", "lca")
SIGMA = 1.3  # σ ≠ 1 so that a misplaced σ² shows up


def gmmk_log_likelihood(beta: np.ndarray, y: np.ndarray, k: int) -> float:
    """log Σ_k π_k N(y; μ_k, σ²I), β = (μ_1 … μ_K, α), written out component by component."""
    d = y.size
    alpha = beta[k * d :]
    log_pi = alpha - logsumexp(alpha)
    terms = [
        log_pi[c] + float(np.sum(norm.logpdf(y, loc=beta[c * d : (c + 1) * d], scale=SIGMA)))
        for c in range(k)
    ]
    return float(logsumexp(terms))


def lca_log_likelihood(beta: np.ndarray, x: np.ndarray, k: int) -> float:
    """log Σ_k π_k Π_{j observed} p_kj^x_j (1 − p_kj)^(1 − x_j), β = (θ_1 … θ_K, α)."""
    d = x.size
    alpha = beta[k * d :]
    log_pi = alpha - logsumexp(alpha)
    terms = []
    for c in range(k):
        p = expit(beta[c * d : (c + 1) * d])
        total = log_pi[c]
        for j in range(d):
            if not math.isnan(x[j]):
                total += math.log(p[j]) if x[j] == 1.0 else math.log(1.0 - p[j])
        terms.append(total)
    return float(logsumexp(terms))


@pytest.mark.parametrize("k", [2, 3, 4])
def test_gmmk_gradient_is_the_preconditioned_score(k: int) -> None:
    # Fisher's identity: ∇q_i(β; β) = ∇ log p_β(y_i). The model returns σ² times it on the
    # means and 2 times it on the weight logits (docs/MATH.md (7.2)).
    model = get_model("gmmk", {"components": k})
    rng = np.random.default_rng(21)
    records, beta_star = model.generate(5, 3, snr=3.0, sigma=SIGMA, rng=rng)
    beta = beta_star + 0.5 * rng.standard_normal(beta_star.size)
    grads = model.gradients(beta, records, SIGMA)
    assert grads.shape == (5, k * 4)
    scale = np.r_[np.full(k * 3, SIGMA**2), np.full(k, 2.0)]
    for i in range(records.n):
        score = finite_difference(partial(gmmk_log_likelihood, y=records.x[i], k=k), beta)
        np.testing.assert_allclose(grads[i], scale * score, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("k", [2, 3])
def test_lca_gradient_is_the_preconditioned_score_missing_items_skipped(k: int) -> None:
    # 4 times the score on the item logits, 2 times on the class logits (MATH (7.6)); a
    # missing item is left out of the record's likelihood, so its gradient is 0.
    model = get_model("lca", {"components": k})
    rng = np.random.default_rng(22)
    records, beta_star = model.generate(8, 4, snr=3.0, sigma=1.0, missing=0.3, rng=rng)
    assert np.isnan(records.x).any()
    beta = beta_star + 0.5 * rng.standard_normal(beta_star.size)
    grads = model.gradients(beta, records, 1.0)
    scale = np.r_[np.full(k * 4, 4.0), np.full(k, 2.0)]
    for i in range(records.n):
        score = finite_difference(partial(lca_log_likelihood, x=records.x[i], k=k), beta)
        np.testing.assert_allclose(grads[i], scale * score, rtol=1e-6, atol=1e-7)
        missing = np.isnan(records.x[i])
        assert np.all(grads[i, : k * 4].reshape(k, 4)[:, missing] == 0.0)


@pytest.mark.parametrize("name", MIXTURES)
def test_mean_gradient_at_truth_is_near_zero(name: str) -> None:
    # E ∇q(β*; β*) = 0: each coordinate's mean within 5 standard errors of zero.
    assert_mean_gradient_near_zero(name, n=200_000, d=6, seed=23)


@pytest.mark.parametrize(("k", "d"), [(3, 5), (2, 2), (4, 2)])
def test_gmmk_generator_separates_the_means_by_snr_sigma(k: int, d: int) -> None:
    model = get_model("gmmk", {"components": k})
    records, beta_star = model.generate(
        60_000, d, snr=3.0, sigma=0.7, rng=np.random.default_rng(24)
    )
    means = beta_star[: k * d].reshape(k, d)
    distances = sorted(
        float(np.linalg.norm(means[a] - means[b])) for a, b in itertools.combinations(range(k), 2)
    )
    # K ≤ d: a simplex, every pair at 3σ; K > d: a line, neighbours at 3σ.
    assert distances[0] == pytest.approx(2.1)
    if k <= d:
        assert distances[-1] == pytest.approx(2.1)
    weights = np.exp(beta_star[k * d :]) / np.exp(beta_star[k * d :]).sum()
    nearest = np.argmin(((records.x[:, None, :] - means[None]) ** 2).sum(axis=2), axis=1)
    # Each record's nearest mean is its component's for most records at 3σ: the shares
    # follow the weights within a few points.
    np.testing.assert_allclose(np.bincount(nearest, minlength=k) / records.n, weights, atol=0.05)


def test_lca_generator_items_and_missing_share() -> None:
    model = get_model("lca")
    records, beta_star = model.generate(
        90_000, 9, snr=3.0, sigma=1.0, missing=0.2, rng=np.random.default_rng(25)
    )
    items = beta_star[:27].reshape(3, 9)
    assert set(np.unique(items)) == {-1.5, 1.5}
    # Each item is "yes" for exactly one class (the deal of the items into K groups).
    assert np.all((items > 0).sum(axis=0) == 1)
    assert abs(np.isnan(records.x).mean() - 0.2) < 0.005
    observed = records.x[~np.isnan(records.x)]
    assert set(np.unique(observed)) == {0.0, 1.0}


@pytest.mark.parametrize("k", [2, 3, 5])
def test_lca_tau_bounds_the_second_moment_where_the_em_goes(k: int) -> None:
    # (7.7): 16 E[w² (x − p)²] ≤ 16 π_k, whatever β. The earlier rule 4/K assumed
    # E(x − p)² ≤ ¼; at a start (K = 2) and with every item logit of the wrong sign
    # (K = 3) a coordinate's second moment is above 4/K.
    model = get_model("lca", {"components": k})
    rng = np.random.default_rng(60 + k)
    records, beta_star = model.generate(50_000, 10, snr=3.0, sigma=1.0, rng=rng)
    wrong_signs = beta_star.copy()
    wrong_signs[: k * 10] *= -1.0
    tau = model.default_tau(beta_bound=3.0, sigma=1.0, d=10)
    assert tau == pytest.approx(16.0 / k)
    for beta in (beta_star, model.start(10, 1.0, rng), wrong_signs):
        second_moment = (model.gradients(beta, records, 1.0) ** 2).mean(axis=0)
        assert second_moment.max() <= tau


@pytest.mark.parametrize("name", MIXTURES)
def test_generators_are_seeded(name: str) -> None:
    model = get_model(name)
    a, star_a = model.generate(200, 4, rng=np.random.default_rng(3))
    b, star_b = model.generate(200, 4, rng=np.random.default_rng(3))
    np.testing.assert_array_equal(a.x, b.x)
    np.testing.assert_array_equal(star_a, star_b)


def drawn_mixture(
    name: str, k: int, d: int, *, seed: int
) -> tuple[Model, np.random.Generator, np.ndarray]:
    """Mixture ``name`` with k components, the generator seeded with ``seed`` and the β*
    (k·(d + 1),) it drew for d columns (from 10 records, of which nothing else is kept)."""
    model = get_model(name, {"components": k})
    rng = np.random.default_rng(seed)
    _, beta_star = model.generate(10, d, rng=rng)
    return model, rng, beta_star


@pytest.mark.parametrize("name", MIXTURES)
def test_error_is_up_to_a_relabelling_and_the_minimum_over_all(name: str) -> None:
    k, d = 4, 5
    model, rng, beta_star = drawn_mixture(name, k, d, seed=26)
    blocks, logits = beta_star[: k * d].reshape(k, d), beta_star[k * d :]
    order = np.array([2, 0, 3, 1])
    relabelled = np.r_[blocks[order].ravel(), logits[order] + 5.0]  # and shifted logits
    assert model.error(relabelled, beta_star) == pytest.approx(0.0, abs=1e-12)
    for _ in range(5):
        beta = beta_star + rng.standard_normal(beta_star.size)
        brute = min(
            math.sqrt(
                sum(
                    float(np.sum((beta[p * d : (p + 1) * d] - beta_star[c * d : (c + 1) * d]) ** 2))
                    for c, p in enumerate(perm)
                )
                + float(
                    np.sum(
                        (
                            (beta[k * d :] - beta[k * d :].mean())[list(perm)]
                            - (logits - logits.mean())
                        )
                        ** 2
                    )
                )
            )
            for perm in itertools.permutations(range(k))
        )
        assert model.error(beta, beta_star) == pytest.approx(brute, rel=1e-12)


@pytest.mark.parametrize("name", MIXTURES)
def test_align_relabels_to_the_reference_as_the_error_matches_them(name: str) -> None:
    k, d = 4, 5
    model, rng, beta_star = drawn_mixture(name, k, d, seed=27)
    for _ in range(5):
        beta = beta_star + 0.3 * rng.standard_normal(beta_star.size)
        beta[k * d :] -= beta[k * d :].mean()  # the error centres the logits; align keeps them
        blocks, logits = beta[: k * d].reshape(k, d), beta[k * d :]
        order = rng.permutation(k)
        shuffled = np.r_[blocks[order].ravel(), logits[order]]
        aligned = model.align(shuffled, beta_star)
        # Small noise about well-separated components: the relabelling undoes the shuffle.
        np.testing.assert_array_equal(aligned, beta)
        assert model.error(shuffled, beta_star) == pytest.approx(
            float(np.linalg.norm(aligned - beta_star)), rel=1e-12
        )
    diverged = np.full(beta_star.size, np.nan)
    assert np.isnan(model.align(diverged, beta_star)).all()


def _zero_error(name: str, k: int, d: int, separation: float) -> float:
    """‖β*‖ of the generator's β*, weight logits centred, from docs/MATH.md §7: gmmk's
    simplex (K ≤ d) Σ‖μ_k‖² = (K − 1)s²/2, its line (K > d) s²K(K² − 1)/12; lca K·d·(snr/2)²;
    the logits evenly from −¼ to ¼, Σ ᾱ_k² = K(K + 1)/(48(K − 1))."""
    if name == "lca":
        blocks = k * d * (separation / 2.0) ** 2
    elif k <= d:
        blocks = (k - 1) * separation**2 / 2.0
    else:
        blocks = separation**2 * k * (k * k - 1) / 12.0
    return math.sqrt(blocks + k * (k + 1) / (48.0 * (k - 1)))


@pytest.mark.parametrize(
    ("name", "k", "d"),
    [("gmmk", 2, 5), ("gmmk", 3, 5), ("gmmk", 5, 3), ("lca", 2, 4), ("lca", 3, 10)],
)
def test_trivial_estimate_is_the_better_of_beta_zero_and_the_start(
    name: str, k: int, d: int
) -> None:
    model = get_model(name, {"components": k})
    label, error = model.trivial_estimate(d, snr=3.0, sigma=1.0)
    zero = _zero_error(name, k, d, 3.0)
    rng = np.random.default_rng(31)  # not the estimate's own seed
    for _ in range(3):  # β = 0's error does not depend on the draw of β*
        star = model.draw_parameter(d, snr=3.0, sigma=1.0, rng=rng)
        assert model.error(np.zeros_like(star), star) == pytest.approx(zero, rel=1e-12)
    starts = [model.error(model.start(d, 1.0, rng), star) for _ in range(2000)]
    start, spread = float(np.mean(starts)), float(np.std(starts))
    # Two means of independent starts: within 4 standard errors of their difference.
    tolerance = 4.0 * spread * math.sqrt(1 / 2000 + 1 / 1000)
    if label == "β = 0":
        assert error == pytest.approx(zero, rel=1e-12) and start > zero - tolerance
    else:
        assert label == "the start β⁰" and error < zero
        assert error == pytest.approx(start, abs=tolerance)


@pytest.mark.parametrize("name", MIXTURES)
def test_the_components_option(name: str) -> None:
    default = get_model(name)
    assert default.option_values() == {"components": 3}
    assert default.parameter_dim(5) == 18
    four = get_model(name, {"components": 4})
    assert four.option_values() == {"components": 4} and four.parameter_dim(5) == 24
    assert get_model(name) is default  # the registered instance is not changed
    bad: Any
    for bad in (1, 11, 2.5, True):
        with pytest.raises(ValueError, match=r"components must be an integer in \[2, 10\]"):
            default.configured({"components": bad})
    with pytest.raises(ValueError, match=f"model {name} has no option colours"):
        default.configured({"colours": 2})
    with pytest.raises(ValueError, match="model gmm has no option components"):
        get_model("gmm", {"components": 3})


@pytest.mark.parametrize("name", MIXTURES)
def test_start_rule_is_public_and_breaks_the_symmetry(name: str) -> None:
    model = get_model(name, {"components": 4})
    a = model.start(3, 1.0, np.random.default_rng(5))
    b = model.start(3, 1.0, np.random.default_rng(5))
    assert model.start_rule != "random-direction"
    np.testing.assert_array_equal(a, b)
    assert a.shape == (16,)
    blocks = a[:12].reshape(4, 3)
    assert len({tuple(row) for row in blocks}) == 4  # no two components start equal
    assert np.all(a[12:] == 0.0)  # equal weights


@pytest.mark.parametrize("name", MIXTURES)
@pytest.mark.parametrize("mechanism", mechanism_names())
def test_every_mechanism_runs_it(name: str, mechanism: str) -> None:
    study = Study(
        model=name,
        mechanism=mechanism,
        n=4000,
        d=4,
        rounds=3,
        hospitals=4,
        seed=2,
        model_options=(("components", 2),),
    )
    result = run_study(study)
    assert result.parameter_dim == 10 and result.beta.shape == (10,)
    assert np.all(np.isfinite(result.beta))
    assert result.final_error is not None and math.isfinite(result.final_error)


def test_simulate_takes_components(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--model", "gmmk", "--n", "3000", "--d", "2", "--rounds", "3"]
    assert main([*argv, "--components", "4", "--draws", "0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == "gmmk" and out["d"] == 2 and len(out["beta"]) == 4 * 3
    assert main([*argv, "--components", "4", "--draws", "0"]) == 0
    assert "error ‖β − β*‖ up to a relabelling of the components = " in capsys.readouterr().out
    assert main([*argv, "--components", "11", "--draws", "0"]) == 2
    assert "components must be an integer in [2, 10]" in capsys.readouterr().err
    argv[2] = "gmm"
    assert main([*argv, "--components", "3", "--draws", "0"]) == 2
    assert "model gmm has no option components" in capsys.readouterr().err


def test_records_of_an_lca_study_may_miss_items() -> None:
    model = get_model("lca")
    records, beta_star = model.generate(
        3000, 5, missing=0.3, rng=np.random.default_rng(9), snr=3.0, sigma=1.0
    )
    assert isinstance(records, Records) and records.y is None
    grads = model.gradients(beta_star, records, 1.0)
    assert np.all(np.isfinite(grads))


@pytest.mark.parametrize("reuse", [False, True])  # the fast path, and run_study's own
def test_the_planners_runs_take_the_components(reuse: bool) -> None:
    # The fast path (the plan, the forecast, the bootstrap) draws β* and β⁰ of K·(d + 1)
    # values with the study's K, and keeps the records of different K apart.
    from ldpem.common.planning.fastsim import fast_path, runs

    study = Study(model="gmmk", mechanism="none", n=3000, d=3, rounds=4, reuse=reuse, hospitals=2)
    assert fast_path(study) is not reuse
    for k in (2, 4):
        found = runs(replace(study, model_options=(("components", k),)), [0, 1])
        assert [run.estimate.shape for run in found] == [(k * 4,)] * 2
        assert all(run.beta_star.shape == (k * 4,) and math.isfinite(run.error) for run in found)


def test_a_model_with_a_bad_option_declaration_is_refused() -> None:
    from ldpem.common.models import ModelOption, register_model
    from ldpem.common.models.gmmk import GaussianMixtureK

    class Wrong(GaussianMixtureK):
        name = "gmmk-wrong"
        options = (ModelOption("components", default=1, low=2, high=10, help="K"),)

    with pytest.raises(ValueError, match="model gmmk-wrong: option 'components' needs"):
        register_model(Wrong())
