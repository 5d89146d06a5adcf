"""The fast path has the distribution of ``run_study``: means and 10–90% bands of the final
errors agree on a grid of models × mechanisms, within tolerances from their standard errors.

Each case runs ``RUNS`` studies through ``run_study`` (seeds 0 … RUNS−1) and ``RUNS``
through ``fastsim.final_errors`` (other seeds, so that no β* is shared), at a small size
(n = 5000 over three unequal hospitals, d = 3, T = 5) where each costs a few ms. Compared:

* the means, by z = Δ/√(s_a²/R + s_b²/R) (Welch);
* each band end p ∈ {0.1, 0.9}: the share of fast-path errors below ``run_study``'s
  p-quantile, against p, with the standard error √(p(1−p)·(1/R + 1/R)) (the quantile's
  own sampling error and the share's).

The cases: gmm/mrm/rmc × local/hospital/central, and gmm with noise shares (secagg), with
clipping (local-clip) and without noise (none), whose contributions the fast path sums in
floats. 36 comparisons at |z| ≤ 2 would fail one of them ~80% of the time for identical
distributions; each is held to the Bonferroni bound for a 1% family-wise false alarm,
|z| ≤ Φ⁻¹(1 − 0.01/72) ≈ 3.64, and the twelve mean z's together to Σ z² ≤ χ²₁₂(0.99) =
26.2, which catches a shift of ~1 standard error shared by every case.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from scipy.stats import chi2, norm

from ldpem.common.planning.fastsim import final_errors, simulate
from ldpem.common.planning.study import Study, run_study

pytestmark = pytest.mark.slow

RUNS = 200
MODELS = ("gmm", "mrm", "rmc")
MECHANISMS = ("local", "hospital", "central")
#: The issue's grid, noise shares (their fine-grid sum, ``holder_sum._holder_sum``) and the
#: float sums of clipping and of no noise.
CASES = [(m, k) for m in MODELS for k in MECHANISMS] + [
    ("gmm", "secagg"),
    ("gmm", "local-clip"),
    ("gmm", "none"),
]
COMPARISONS = len(CASES) * 3
Z_LIMIT = float(norm.ppf(1 - 0.01 / (2 * COMPARISONS)))
CHI2_LIMIT = float(chi2.ppf(0.99, len(CASES)))


def study(model: str, mechanism: str) -> Study:
    return Study(model=model, mechanism=mechanism, n=5000, d=3, rounds=5, sizes=(800, 1700, 2500))


def reference_errors(base: Study) -> np.ndarray:
    errors = [run_study(replace(base, seed=seed)).final_error for seed in range(RUNS)]
    return np.array(errors, dtype=np.float64)


def z_scores(reference: np.ndarray, fast: np.ndarray) -> dict[str, float]:
    """The mean's and both band ends' standardized differences (module docstring)."""
    se = math.sqrt(reference.var(ddof=1) / RUNS + fast.var(ddof=1) / RUNS)
    found = {"mean": (fast.mean() - reference.mean()) / se}
    for p in (0.1, 0.9):
        quantile = np.quantile(reference, p)
        share = float(np.mean(fast < quantile))
        found[f"q{p:g}"] = (share - p) / math.sqrt(p * (1 - p) * (2 / RUNS))
    return found


def test_the_fast_path_has_the_distribution_of_run_study() -> None:
    table = {}
    for model, mechanism in CASES:
        base = study(model, mechanism)
        reference = reference_errors(base)
        fast = final_errors(base, range(10_000, 10_000 + RUNS))
        assert np.all(np.isfinite(reference)) and np.all(np.isfinite(fast))
        table[(model, mechanism)] = z_scores(reference, fast)
    report = "; ".join(
        f"{m}/{k}: " + ", ".join(f"{name} {z:+.2f}" for name, z in zs.items())
        for (m, k), zs in table.items()
    )
    print(report)
    worst = max(abs(z) for zs in table.values() for z in zs.values())
    assert worst <= Z_LIMIT, report
    assert sum(zs["mean"] ** 2 for zs in table.values()) <= CHI2_LIMIT, report


def test_a_different_distribution_is_told_apart() -> None:
    """The comparison can fail: ε = 1 against ε = 0.7 on the fast path (a 30% smaller
    budget, a visibly larger error) is far outside the bounds."""
    base = study("gmm", "local")
    reference = reference_errors(base)
    weaker = final_errors(replace(base, epsilon=0.7), range(10_000, 10_000 + RUNS))
    assert z_scores(reference, weaker)["mean"] > Z_LIMIT


def test_the_fast_path_keeps_what_run_study_draws_first() -> None:
    """Same seed, same β* (the first draw of the seed's generator); the bootstrap's β* and
    β⁰ are used as given; a study off the fast path (records reused) is run_study's own."""
    base = study("rmc", "hospital")
    reference = run_study(base).beta_star
    assert reference is not None
    assert np.array_equal(simulate(base).beta_star, reference)
    given = simulate(base, beta_star=[1.0, -2.0, 0.5], beta0=[0.1, 0.2, 0.3])
    assert np.array_equal(given.beta_star, [1.0, -2.0, 0.5])
    reused = replace(Study(n=600, d=2, rounds=3), seed=4, reuse=True)
    assert simulate(reused).error == run_study(reused).final_error
