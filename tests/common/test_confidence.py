"""The parametric bootstrap's region (``ldpem.common.planning.confidence``): its order statistics,
sign alignment, bounds on its arguments, what a draw runs, and its seeds. The calibration
on runs of the real pipeline is ``test_confidence_calibration``."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.typing import NDArray

from ldpem.common.core.errors import UserError
from ldpem.common.models import get_model
from ldpem.common.planning.confidence import (
    DEFAULT_DRAWS,
    bootstrap_estimates,
    bootstrap_seeds,
    bootstrap_study,
    check_bootstrap,
    confidence_region,
    least_draws,
    region,
    region_lines,
    shrinkage,
    shrinkage_region,
)
from ldpem.common.planning.coverage import coverage_runs, synthetic_bootstrap_study
from ldpem.common.planning.executor import PoolExecutor, SerialExecutor
from ldpem.common.planning.study import Study, run_study

FloatArray = NDArray[np.float64]
#: A model without a symmetry (its draws are taken as they are) and one identified up to sign.
UNSIGNED, SIGNED = get_model("rmc"), get_model("gmm")


def test_least_draws_is_the_smallest_b_with_an_order_statistic_at_each_end() -> None:
    assert least_draws(0.9) == 19  # k = ⌊0.05·20⌋ = 1
    assert least_draws(0.95) == 39
    assert least_draws(0.8) == 9
    assert least_draws(0.5) == 3
    for level in (0.5, 0.8, 0.9, 0.95, 0.99):
        b = least_draws(level)
        assert math.floor((1 - level) / 2 * (b + 1) + 1e-9) == 1
        assert math.floor((1 - level) / 2 * b + 1e-9) == 0
    assert least_draws(0.9) <= DEFAULT_DRAWS


@pytest.mark.parametrize("level", [0.0, 1.0, -0.5, 1.5, math.nan, math.inf])
def test_a_level_outside_zero_one_is_refused(level: float) -> None:
    with pytest.raises(UserError, match="level must be in \\(0, 1\\)"):
        check_bootstrap(level, 1000)


@pytest.mark.parametrize(("level", "draws"), [(0.9, 18), (0.9, 0), (0.9, -5), (0.95, 38)])
def test_too_few_draws_are_refused(level: float, draws: int) -> None:
    with pytest.raises(UserError, match=f"draws must be >= {least_draws(level)}"):
        check_bootstrap(level, draws)
    with pytest.raises(UserError):
        region(np.zeros(2), np.zeros((max(draws, 0), 2)), level=level, model=UNSIGNED)


def test_region_takes_the_stated_order_statistics() -> None:
    # B = 19 at 0.9: radius is the 18th smallest distance, each interval reflects the
    # smallest and largest draw about β̂ (the basic interval).
    estimate = np.array([1.0, -2.0])
    offsets = np.arange(1, 20, dtype=np.float64)  # distances 1..19 along coordinate 0
    draws = np.tile(estimate, (19, 1))
    draws[:, 0] += offsets
    draws[:, 1] -= offsets / 10
    found = region(estimate, draws, level=0.9, model=UNSIGNED)
    assert found.radius == pytest.approx(math.hypot(18, 1.8))
    assert found.draws == 19
    # coordinate 0: draws 2..20, basic interval [2·1 − 20, 2·1 − 2]
    assert found.low[0] == pytest.approx(-18.0)
    assert found.high[0] == pytest.approx(0.0)
    # coordinate 1: draws −2.1 … −3.9: [2·(−2) − (−2.1), 2·(−2) − (−3.9)]
    assert found.low[1] == pytest.approx(-1.9)
    assert found.high[1] == pytest.approx(-0.1)


def test_the_basic_interval_corrects_a_bias_the_percentile_would_double() -> None:
    # An estimator biased by +b: β̂ = β* + b + e and, at β̂, β̂_b = β̂ + b + e_b. With an
    # exchangeable pivot the coverage is exactly (B + 1 − 2k)/(B + 1) = 18/20 = 0.9 for
    # B = 19 (and 18/20 for the radius); over 20000 regions each of the 4 coverages is
    # 0.9 ± 4·0.0021. The percentile interval [q_lo, q_hi] is centred at β̂ + b, 2b from
    # β*: with b = 0.8 (e, e_b ~ N(0, 1)) it covers far less.
    rng = np.random.default_rng(12)
    d, bias, runs, k = 3, np.array([0.8, -0.5, 0.0]), 20_000, 1
    beta_star = np.array([1.0, 2.0, -1.0])
    covered = np.zeros(d)
    percentile = np.zeros(d)
    inside = 0
    for _ in range(runs):
        estimate = beta_star + bias + rng.standard_normal(d)
        draws = estimate + bias + rng.standard_normal((19, d))
        found = region(estimate, draws, level=0.9, model=UNSIGNED)
        covered += (np.array(found.low) <= beta_star) & (beta_star <= np.array(found.high))
        inside += int(np.linalg.norm(beta_star - estimate) <= found.radius)
        ordered = np.sort(draws, axis=0)
        percentile += (ordered[k - 1] <= beta_star) & (beta_star <= ordered[19 - k])
    tolerance = 4 * math.sqrt(0.09 / runs)
    assert np.all(np.abs(covered / runs - 0.9) < tolerance), covered / runs
    assert abs(inside / runs - 0.9) < tolerance
    assert percentile[0] / runs < 0.8
    assert abs(percentile[2] / runs - 0.9) < tolerance  # unbiased: the two agree


def test_the_shrinkage_interval_inverts_a_pull_toward_zero_the_basic_one_misses() -> None:
    # An estimator pulled toward 0: β̂ = c·β* + e and, at β̂, β̂_b = c·β̂ + e_b, c = 0.5,
    # e, e_b ~ N(0, 1). The shrinkage interval reads c and e's spread from the draws and
    # inverts β* = (β̂ − e)/c: with c and the draws' mean known it would cover exactly
    # 18/20; estimated from 19 draws, e_b − ē has variance 18/19 of e's, which costs ~0.01
    # (P(|Z| ≤ 1.645·√(18/19)) = 0.890). Over 4000 regions, ±4·√(0.09/4000) = ±0.019 more.
    # The basic interval covers β* iff (2 − c)·e − (1 − c)²·β* falls among the e_b: noise
    # 1.5 times e_b's (0.75 at β*_j = 0) and a shift (1 − c)²·β*_j, far below 0.9.
    rng = np.random.default_rng(13)
    d, runs, slope = 3, 4000, 0.5
    beta_star = np.array([4.0, -6.0, 0.0])
    covered, basic = np.zeros(d), np.zeros(d)
    slopes = []
    for _ in range(runs):
        estimate = slope * beta_star + rng.standard_normal(d)
        draws = slope * estimate + rng.standard_normal((19, d))
        found = shrinkage_region(estimate, draws, level=0.9, model=UNSIGNED)
        plain = region(estimate, draws, level=0.9, model=UNSIGNED)
        covered += (np.array(found.low) <= beta_star) & (beta_star <= np.array(found.high))
        basic += (np.array(plain.low) <= beta_star) & (beta_star <= np.array(plain.high))
        assert found.radius == plain.radius and found.draws == 19
        slopes.append(shrinkage(estimate, draws))
    tolerance = 4 * math.sqrt(0.09 / runs)
    assert np.all(covered / runs >= 0.9 - 0.011 - tolerance), covered / runs
    assert np.all(covered / runs <= 0.9 + tolerance), covered / runs
    assert np.all(basic / runs < 0.8), basic / runs
    assert abs(np.mean(slopes) - slope) < 0.01


def test_the_shrinkage_interval_is_unbounded_without_a_slope_to_invert() -> None:
    estimate = np.array([1.0, -2.0])
    rng = np.random.default_rng(3)
    opposite = -0.5 * estimate + 0.1 * rng.standard_normal((19, 2))  # c < 0
    for draws in (opposite, np.full((19, 2), np.nan), np.zeros((19, 2))):
        found = shrinkage_region(estimate, draws, level=0.9, model=UNSIGNED)
        assert found.low == (-math.inf, -math.inf) and found.high == (math.inf, math.inf)
    assert math.isnan(shrinkage(np.zeros(2), opposite))
    # One diverged draw: c from the finite ones, its coordinate unbounded on both sides.
    near = estimate + 0.01 * rng.standard_normal((19, 2))
    near[0, 0] = np.nan
    found = shrinkage_region(estimate, near, level=0.9, model=SIGNED)
    assert found.low[0] == -math.inf and found.high[0] == math.inf
    assert found.low[1] < -2.0 < found.high[1] and found.high[1] - found.low[1] < 0.1


def test_draws_of_the_other_sign_are_aligned_for_a_symmetric_model() -> None:
    estimate = np.array([2.0, 1.0])
    rng = np.random.default_rng(0)
    near = estimate + 0.01 * rng.standard_normal((19, 2))
    flipped = near.copy()
    flipped[::2] *= -1
    aligned = region(estimate, flipped, level=0.9, model=SIGNED)
    assert aligned == region(estimate, near, level=0.9, model=SIGNED)
    assert aligned.radius < 0.05
    unaligned = region(estimate, flipped, level=0.9, model=UNSIGNED)
    assert unaligned.radius > 4.0


def _shuffled(beta: FloatArray, order: NDArray[np.intp], k: int) -> FloatArray:
    """β (K·(d + 1),) with its components (block and weight logit) in ``order``."""
    blocks, logits = beta[: beta.size - k].reshape(k, -1), beta[beta.size - k :]
    return np.concatenate([blocks[order].ravel(), logits[order]])


@pytest.mark.parametrize("name", ["gmmk", "lca"])
def test_draws_with_their_components_permuted_are_relabelled_for_a_mixture(name: str) -> None:
    """Issue 44: each bootstrap run starts afresh, so its components come back in any
    order; relabelled to β̂ (the model's own ``align``), a permuted draw counts as the
    draw it is, not as the distance between components."""
    k, d = 3, 4
    model = get_model(name, {"components": k})
    rng = np.random.default_rng(5)
    estimate = model.draw_parameter(d, snr=3.0, sigma=1.0, rng=rng)
    near = estimate + 0.05 * rng.standard_normal((19, estimate.size))
    near[:, k * d :] -= near[:, k * d :].mean(axis=1, keepdims=True)
    permuted = np.array([_shuffled(b, rng.permutation(k), k) for b in near])
    assert not np.array_equal(permuted, near)
    for made in (region, shrinkage_region):
        aligned = made(estimate, permuted, level=0.9, model=model)
        assert aligned == made(estimate, near, level=0.9, model=model)
        assert aligned.radius < 0.5
        # Taken as they came, the permuted draws are a component's distance away (the
        # means 3σ apart, the item logits 3 apart on 2d/K items).
        assert made(estimate, permuted, level=0.9, model=UNSIGNED).radius > 2.5


def test_a_mixtures_bootstrap_region_holds_its_estimate_tightly() -> None:
    """End to end: every bootstrap run of gmmk starts at its own random means, and its
    components come back in their own order; relabelled, the region is about the noise of
    the estimate (non-private EM on 20,000 records: about 0.15), not the 3σ between means,
    which the same draws taken as they came give."""
    study = Study(
        model="gmmk",
        mechanism="none",
        n=20_000,
        d=5,
        rounds=30,
        seed=1,
        model_options=(("components", 3),),
    )
    result = run_study(study)
    assert result.final_error is not None and result.final_error < 0.5
    found = confidence_region(result, draws=19, seed=1)
    assert found.radius < 1.0
    assert len(found.low) == 18  # K·(d + 1)
    draws = bootstrap_estimates(bootstrap_study(result), result.estimate, bootstrap_seeds(19, 1))
    assert region(result.estimate, draws, level=0.9, model=UNSIGNED).radius > 3.0


def test_diverged_draws_make_an_unbounded_region_not_a_crash() -> None:
    estimate = np.array([1.0, 1.0])
    draws = np.tile(estimate, (19, 1))
    draws[0, 0] = np.nan
    draws[1, 1] = np.inf
    draws[2] = -np.inf
    found = region(estimate, draws, level=0.9, model=UNSIGNED)
    assert found.radius == math.inf  # 3 of 19 draws are infinitely far: above the 18th
    # coordinate 0: NaN counts on both sides, −inf below; coordinate 1: +inf and −inf
    assert found.low == (-math.inf, -math.inf)
    assert found.high == (math.inf, math.inf)
    one = region(
        estimate,
        np.where(np.arange(19)[:, None] == 0, np.nan, draws[3]),
        level=0.9,
        model=SIGNED,
    )
    assert one.low == (-math.inf, -math.inf)  # one NaN draw is the largest at k = 1
    assert one.high == (math.inf, math.inf)  # and the smallest
    assert one.radius == 0.0
    summary = found.summary()
    assert summary["radius"] is None
    assert summary["low"] == [None, None]
    lines = region_lines(summary, [1.0, 1.0])
    assert "‖β − β̂‖ ≤ inf" in lines[0]
    assert lines[1].endswith("[-inf, inf]")


def test_seeds_come_from_the_os_unless_one_is_given() -> None:
    assert bootstrap_seeds(50, 7) == bootstrap_seeds(50, 7)
    assert bootstrap_seeds(50, 7) != bootstrap_seeds(50, 8)
    drawn = bootstrap_seeds(50)
    assert len(set(drawn)) == 50
    assert drawn != bootstrap_seeds(50)
    assert all(0 <= s < 2**63 for s in drawn + bootstrap_seeds(50, 7))


def test_the_bootstrap_study_is_the_runs_pipeline_with_its_resolved_values() -> None:
    study = Study(
        model="rmc",
        mechanism="hospital",
        n=3000,
        hospitals=3,
        rounds=5,
        epsilon=2.0,
        schedule="geometric:1.5",
        final="average:2",
        outliers=0.05,
        seed=4,
    )
    result = run_study(study)
    drawn = bootstrap_study(result)
    assert drawn.sizes == result.hospital_sizes
    assert (drawn.n, drawn.d, drawn.delta, drawn.tau) == (3000, 10, result.delta, result.tau)
    assert drawn.beta_bound == result.beta_bound
    assert drawn.missing == 0.1
    assert drawn.outliers == 0.0
    for name in ("model", "mechanism", "rounds", "epsilon", "schedule", "final", "accounting"):
        assert getattr(drawn, name) == getattr(study, name)
    estimates = bootstrap_estimates(drawn, result.estimate, [1, 2, 3])
    assert estimates.shape == (3, 10)
    assert np.all(np.isfinite(estimates))
    assert len({tuple(e) for e in estimates}) == 3


def test_a_region_is_replayed_by_its_seed_on_any_executor() -> None:
    result = run_study(Study(n=2000, rounds=4, mechanism="central", seed=3))
    serial = confidence_region(result, draws=19, seed=5, executor=SerialExecutor())
    with PoolExecutor(2) as pool:
        pooled = confidence_region(result, draws=19, seed=5, executor=pool)
    assert serial == pooled
    assert serial.draws == 19
    assert all(lo < hi for lo, hi in zip(serial.low, serial.high, strict=True))
    assert 0 < serial.radius < math.inf
    assert confidence_region(result, draws=19).radius != serial.radius  # OS seeds


def test_coverage_runs_judge_each_region_against_its_own_runs_beta_star() -> None:
    study = Study(n=2000, d=3, rounds=5, sizes=(500, 1500))
    found = coverage_runs(study, runs=3, seed_base=7, draws=19, intervals="shrinkage")
    again = coverage_runs(study, runs=3, seed_base=7, draws=19, intervals="basic")
    assert len(found) == 3 and len({run.error for run in found}) == 3
    for shrunk, basic in zip(found, again, strict=True):
        assert shrunk.error == basic.error and shrunk.radius == basic.radius  # same draws
        assert shrunk.inside == (shrunk.error <= shrunk.radius)
        assert 0.0 <= shrunk.coordinates <= 1.0 and shrunk.width > 0.0
    with pytest.raises(ValueError, match="intervals must be one of"):
        coverage_runs(study, runs=1, seed_base=7, draws=19, intervals="percentile")


def test_a_synthetic_bootstrap_needs_the_hospitals_sizes() -> None:
    with pytest.raises(ValueError, match="sizes must be given for 3 hospitals"):
        synthetic_bootstrap_study(Study(model="rmc", hospitals=3))
    fixed = synthetic_bootstrap_study(Study(model="rmc", sizes=(100, 200), outliers=0.1))
    assert fixed.missing == 0.1 and fixed.outliers == 0.0 and fixed.sizes == (100, 200)
