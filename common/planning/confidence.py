"""Confidence regions for a released estimate β̂ by parametric bootstrap.

Ferrando, Wang and Sheldon, *Parametric Bootstrap for Differentially Private Confidence
Intervals*, AISTATS 2022: the distribution of the estimation error β̂ − β* is unknown, but
the run's whole pipeline can be run again on synthetic data drawn at β̂ (the model's
generator with β* := β̂), B times. Each draw b gives an estimate β̂_b, and the spread of
β̂_b − β̂ stands for that of β̂ − β* (the bootstrap principle):

- the radius r is the ⌈level·(B + 1)⌉-th smallest of ‖β̂_b − β̂‖₂, so that
  {β : ‖β − β̂‖₂ ≤ r} holds β* at the stated level;
- coordinate j's interval inverts the estimator's pull toward 0 (``shrinkage_region``):
  [(β̂_j − (q_hi − β̄_j))/c, (β̂_j − (q_lo − β̄_j))/c], q_lo and q_hi the k-th smallest and
  k-th largest of the β̂_b,j with k = ⌊(1 − level)/2·(B + 1)⌋, β̄ the draws' mean and
  c = ⟨β̄, β̂⟩/‖β̂‖² (``shrinkage``). With c = 1 it is the *basic* (pivotal) interval
  [2β̂_j − q_hi, 2β̂_j − q_lo] (``region``), which corrects a bias that does not depend
  on β* but falls short when truncation pulls hard (c well below 1: local DP for mrm and
  rmc, docs/RESULTS.md); the percentile interval [q_lo, q_hi] would double the bias.

With these order statistics the coverage is at least ``level`` for any B when β̂ − β* and
the β̂_b − β̂ have one distribution (the pivot): β̂ − β* is then one more exchangeable draw
among B + 1. That is why a small B is calibrated too (only its width varies more), and
why B must be at least ``least_draws(level)`` (19 at 0.9). The symmetric models (gmm,
mrm: β and −β are one model) identify β̂ up to sign: each β̂_b is first aligned to β̂
(negated when ⟨β̂_b, β̂⟩ < 0), and the region holds β* or −β*, whichever is nearer. The
mixtures (gmmk, lca) identify β̂ up to a relabelling of the components: each β̂_b is
first relabelled to match β̂ (the assignment their error takes, ``Model.align``), and the
region holds the relabelling of β* nearest β̂.

What is drawn (``bootstrap_study``): the run's own study, with every public value
resolved as the run resolved it (model, d, σ, the hospitals' sizes, mechanism, ε, δ,
accounting, τ, B, scale, schedule, final rule, rounds, η, reuse, dropouts), on n records
of the model's generator at β̂: for mrm and rmc the covariates are the generator's
(x ~ N(0, I_d)), and for rmc a share ``missing`` of them is missing (the study's, 0.1 by
default), whatever the real data's covariates are. No outliers are planted. β⁰ is drawn
afresh in each draw, as the coordinator draws it.

Privacy: the bootstrap reads the released estimate and public values only; it is
post-processing of a differentially private output and costs no privacy
(docs/PRIVACY.md). Its seeds come from the OS (``secrets``) unless a seed is given;
``Confidence.draws`` says how many draws made the region.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldpem.common.core.errors import UserError
from ldpem.common.models import Model, get_model
from ldpem.common.planning.executor import Executor, make_executor
from ldpem.common.planning.fastsim import final_estimates, runs
from ldpem.common.planning.study import Study, StudyResult, study_model

__all__ = [
    "BASIC_METHOD",
    "DEFAULT_DRAWS",
    "DEFAULT_LEVEL",
    "METHOD",
    "Bootstrap",
    "Confidence",
    "RegionDraws",
    "bootstrap_estimates",
    "bootstrap_seeds",
    "bootstrap_study",
    "check_bootstrap",
    "confidence_region",
    "least_draws",
    "region",
    "region_lines",
    "resolved_missing",
    "shrinkage",
    "shrinkage_region",
    "study_region",
]

FloatArray = NDArray[np.float64]

#: The stated level unless asked otherwise.
DEFAULT_LEVEL = 0.9
#: Bootstrap draws unless asked otherwise. Any B ≥ ``least_draws`` is calibrated (module
#: docstring); more draws only steady the region: at 99 the radius (the 90th of 99 distances)
#: varies by about 3% from one set of draws to another, an interval's end (the 5th from
#: either side) by about 13% of its half-width (normal approximation of an order statistic),
#: and the draws cost 99 runs (docs/RESULTS.md, docs/PERFORMANCE.md).
DEFAULT_DRAWS = 99
#: What ``Confidence.method`` says of the product's regions (``shrinkage_region``).
METHOD = "parametric bootstrap (shrinkage-corrected intervals)"
#: What it says of ``region``'s basic intervals.
BASIC_METHOD = "parametric bootstrap (basic intervals)"


@dataclass(frozen=True)
class Confidence:
    """A confidence region at ``level`` around an estimate β̂ of dimension d.

    ``low``, ``high``: coordinate j's interval (d each); ``radius``: r with ‖β − β̂‖₂ ≤ r
    (up to sign for the symmetric models); ``draws``: the bootstrap estimates that made
    them (B); ``method``: how (``METHOD``)."""

    level: float
    low: tuple[float, ...]
    high: tuple[float, ...]
    radius: float
    draws: int
    method: str = METHOD

    def summary(self) -> dict[str, object]:
        """The JSON object of ``simulate --json`` and a run's result: level, low, high,
        radius, draws and method (a non-finite value as null)."""
        return {
            "level": self.level,
            "low": [_finite(v) for v in self.low],
            "high": [_finite(v) for v in self.high],
            "radius": _finite(self.radius),
            "draws": self.draws,
            "method": self.method,
        }


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def least_draws(level: float) -> int:
    """The fewest draws B whose order statistics give intervals at ``level``:
    ⌈2/(1 − level)⌉ − 1 (19 at 0.9), so that the interval's k is at least 1."""
    return math.ceil(2.0 / (1.0 - level) - 1e-9) - 1


def check_bootstrap(level: float, draws: int) -> None:
    """One-line UserErrors for a level outside (0, 1) or fewer draws than it needs."""
    if not (math.isfinite(level) and 0.0 < level < 1.0):
        raise UserError(f"level must be in (0, 1), got {level!r}")
    least = least_draws(level)
    if draws < least:
        raise UserError(f"draws must be >= {least} at level {level:g}, got {draws!r}")


def region(estimate: FloatArray, draws: FloatArray, *, level: float, model: Model) -> Confidence:
    """The region at ``level`` from the bootstrap estimates (module docstring).

    Parameters
    ----------
    estimate : array of shape (d,)
        β̂, the released estimate.
    draws : array of shape (B, d)
        The bootstrap estimates β̂_b (a non-finite one counts as infinitely far).
    level : float
        In (0, 1); B ≥ ``least_draws(level)``.
    model : Model
        The run's model (with its options): each β̂_b is first aligned to β̂ under its
        symmetry (``Model.align``: the sign for gmm and mrm, the components' relabelling
        for gmmk and lca).

    Returns
    -------
    Confidence
        Per-coordinate basic intervals (d each) and the radius, with ``draws`` = B.
    """
    estimate, draws = _aligned(estimate, draws, level=level, model=model)
    smallest, largest = _order_statistics(draws, level)
    with np.errstate(invalid="ignore"):
        low = np.where(np.isfinite(largest), 2.0 * estimate - largest, -np.inf)
        high = np.where(np.isfinite(smallest), 2.0 * estimate - smallest, np.inf)
    return _confidence(estimate, draws, level, (low, high), BASIC_METHOD)


def _confidence(
    estimate: FloatArray,
    draws: FloatArray,
    level: float,
    bounds: tuple[FloatArray, FloatArray],
    method: str,
) -> Confidence:
    """The region of the intervals ``bounds`` (low, high: d each) and ``region``'s radius."""
    low, high = bounds
    return Confidence(
        level=level,
        low=tuple(float(v) for v in low),
        high=tuple(float(v) for v in high),
        radius=_radius(estimate, draws, level),
        draws=draws.shape[0],
        method=method,
    )


def shrinkage(estimate: FloatArray, draws: FloatArray) -> float:
    """The slope c of the bootstrap's mean along β̂: ⟨β̄, β̂⟩/‖β̂‖², β̄ the mean of the
    finite draws β̂_b (B, d) as given (``shrinkage_region`` first aligns them to β̂ under
    the model's symmetry); NaN when no draw is finite or β̂ = 0 (or not finite). Truncation
    pulls the estimator toward 0, E_β[β̂] ≈ c·β with c < 1 when it pulls hard
    (``shrinkage_region``)."""
    finite = draws[np.all(np.isfinite(draws), axis=1)]
    norm2 = float(estimate @ estimate)
    if finite.shape[0] == 0 or norm2 == 0.0:
        return math.nan
    return float(finite.mean(axis=0) @ estimate) / norm2


def shrinkage_region(
    estimate: FloatArray, draws: FloatArray, *, level: float, model: Model
) -> Confidence:
    """``region`` with intervals corrected for the estimator's shrinkage toward 0.

    The basic interval assumes E_β[β̂] = β + a, a bias that does not depend on β, so that
    β̂ − β* and β̂_b − β̂ share one distribution. Truncation instead pulls the estimate
    toward 0 in proportion: E_β[β̂] ≈ c·β. Then β̂ = c·β* + e and β* = (β̂ − e)/c, e's
    spread read from the draws about their mean β̄ (≈ c·β̂): coordinate j's interval is
    [(β̂_j − (q_hi − β̄_j))/c, (β̂_j − (q_lo − β̄_j))/c], q_lo and q_hi ``region``'s
    order statistics and c = ``shrinkage``. With c = 1 and no bias it is the basic
    interval; when c is small the basic interval is (2 − c)-times the noise about a
    centre (2 − c)·c·β* and falls short (docs/RESULTS.md). Unbounded when c ≤ 0 or not
    finite (the draws do not follow β̂: no slope to invert). The radius is ``region``'s.
    """
    estimate, draws = _aligned(estimate, draws, level=level, model=model)
    slope = shrinkage(estimate, draws)
    d = estimate.size
    low, high = np.full(d, -np.inf), np.full(d, np.inf)
    if math.isfinite(slope) and slope > 0.0:
        mean = draws[np.all(np.isfinite(draws), axis=1)].mean(axis=0)
        smallest, largest = _order_statistics(draws, level)
        with np.errstate(invalid="ignore"):
            low = np.where(np.isfinite(largest), (estimate - largest + mean) / slope, -np.inf)
            high = np.where(np.isfinite(smallest), (estimate - smallest + mean) / slope, np.inf)
    return _confidence(estimate, draws, level, (low, high), METHOD)


def _aligned(
    estimate: FloatArray, draws: FloatArray, *, level: float, model: Model
) -> tuple[FloatArray, FloatArray]:
    """β̂ (p,) and the draws (B, p), each in the labelling nearest β̂ under ``model``'s
    symmetry (``Model.align``: negated when ⟨β̂_b, β̂⟩ < 0 for gmm and mrm, its components
    relabelled for gmmk and lca; a draw that diverged as it is); checks B against
    ``level``. Without it a draw whose components came back in another order would count
    as far from β̂ as the distance between components, and inflate the region."""
    estimate = np.asarray(estimate, dtype=np.float64)
    draws = np.array(draws, dtype=np.float64).reshape(-1, estimate.size)
    check_bootstrap(level, draws.shape[0])
    aligned = np.array([model.align(draw, estimate) for draw in draws], dtype=np.float64)
    return estimate, aligned.reshape(draws.shape)


def _radius(estimate: FloatArray, draws: FloatArray, level: float) -> float:
    """The ⌈level·(B + 1)⌉-th smallest ‖β̂_b − β̂‖ (a non-finite one as +inf)."""
    count = draws.shape[0]
    with np.errstate(invalid="ignore"):
        distances = np.linalg.norm(draws - estimate, axis=1)
    distances = np.sort(np.where(np.isnan(distances), np.inf, distances))
    return float(distances[math.ceil(level * (count + 1) - 1e-9) - 1])


def _order_statistics(draws: FloatArray, level: float) -> tuple[FloatArray, FloatArray]:
    """Per coordinate, the k-th smallest and k-th largest draw (d each), k =
    ⌊(1 − level)/2·(B + 1)⌋. A diverged (NaN) coordinate counts as far on both sides:
    last when sorting for the k-th largest, first when sorting for the k-th smallest."""
    count = draws.shape[0]
    k = math.floor((1.0 - level) / 2.0 * (count + 1) + 1e-9)
    largest = np.sort(np.where(np.isnan(draws), np.inf, draws), axis=0)[count - k]
    smallest = np.sort(np.where(np.isnan(draws), -np.inf, draws), axis=0)[k - 1]
    return smallest, largest


def bootstrap_study(result: StudyResult) -> Study:
    """The pipeline a bootstrap draw runs: ``result``'s study with every value its run
    resolved (n, d, δ, τ, B, the hospitals' sizes) fixed, no outliers; its synthetic
    records come from ``bootstrap_estimates``, not from the study's snr."""
    sizes = result.hospital_sizes
    missing = resolved_missing(result.study.model, result.study.missing)
    return replace(
        result.study,
        n=result.n,
        d=result.d,
        delta=result.delta,
        tau=result.tau,
        beta_bound=result.beta_bound,
        sizes=sizes if len(sizes) > 1 else None,
        hospitals=len(sizes),
        missing=missing,
        outliers=0.0,
    )


def resolved_missing(model: str, missing: float | None) -> float:
    """The share of missing covariates a bootstrap draws: ``missing``, else the study's
    default (0.1 for a model that allows missing covariates, rmc; 0 otherwise)."""
    if missing is not None:
        return missing
    return 0.1 if get_model(model).allows_missing else 0.0


def bootstrap_seeds(draws: int, seed: int | None = None) -> list[int]:
    """B seeds, one per draw: from the OS (``secrets``), or derived from ``seed``
    (``numpy.random.SeedSequence``) to replay a region."""
    if seed is None:
        return [secrets.randbits(63) for _ in range(draws)]
    state = np.random.SeedSequence(seed).generate_state(draws, np.uint64)
    return [int(s) >> 1 for s in state]


def bootstrap_estimates(
    study: Study, estimate: FloatArray, seeds: Sequence[int], *, executor: Executor | None = None
) -> FloatArray:
    """The estimates of ``study`` (``bootstrap_study``) run on the model's synthetic data
    at β* := β̂ = ``estimate`` (d,), one per seed, on the fast path
    (``fastsim.runs``: the distribution of ``run_study``'s estimate).

    Returns
    -------
    array of shape (len(seeds), d)
    """
    found = runs(study, seeds, executor=executor, beta_star=estimate)
    return final_estimates(found, study_model(study).parameter_dim(study.d))


@dataclass(frozen=True)
class RegionDraws:
    """What a region asks of its bootstrap: B = ``draws`` runs for a region at ``level``,
    their seeds derived from ``seed`` (``bootstrap_seeds``) or, when None, from the OS.

    ``level`` is in (0, 1) and ``draws`` ≥ ``least_draws(level)`` (``check_bootstrap``,
    when the region is made)."""

    level: float = DEFAULT_LEVEL
    draws: int = DEFAULT_DRAWS
    seed: int | None = None


def study_region(
    study: Study,
    estimate: FloatArray,
    asked: RegionDraws,
    *,
    executor: Executor | None = None,
) -> Confidence:
    """The region at ``asked.level`` around ``estimate`` from ``asked.draws`` runs of
    ``study`` on synthetic data at β̂ (``bootstrap_estimates``), seeded by the OS or by
    ``asked.seed``.

    Parameters
    ----------
    study : Study
        The run's pipeline with its resolved public values (``bootstrap_study``, or a
        federated run's study: ``ldpem.server.confidence``).
    estimate : array of shape (d,)
        β̂, the released estimate.
    asked : RegionDraws
        The level, B and seed of the draws.
    executor : Executor, optional
        Where the draws run (a pool, Dask); default this process.

    Returns
    -------
    Confidence
        Unbounded, from 0 draws, when the estimate is not finite (nothing to draw at).
    """
    level = asked.level
    check_bootstrap(level, asked.draws)
    estimate = np.asarray(estimate, dtype=np.float64)
    d = estimate.size
    if not np.all(np.isfinite(estimate)):
        return Confidence(level, (-math.inf,) * d, (math.inf,) * d, math.inf, draws=0)
    seeds = bootstrap_seeds(asked.draws, asked.seed)
    found = bootstrap_estimates(study, estimate, seeds, executor=executor)
    return shrinkage_region(estimate, found, level=level, model=study_model(study))


def confidence_region(
    result: StudyResult,
    *,
    level: float = DEFAULT_LEVEL,
    draws: int = DEFAULT_DRAWS,
    seed: int | None = None,
    executor: Executor | None = None,
) -> Confidence:
    """The region around a simulated study's estimate: ``study_region`` of its
    ``bootstrap_study`` (same parameters)."""
    asked = RegionDraws(level=level, draws=draws, seed=seed)
    return study_region(bootstrap_study(result), result.estimate, asked, executor=executor)


@dataclass(frozen=True)
class Bootstrap:
    """The confidence region ``ldpem simulate`` adds to its outcome: ``draws`` at
    ``level`` (0 draws: none), seeded by ``seed`` or the OS, run on ``scheduler``
    (``executor.make_executor``: None for this machine's ``workers`` processes, or a Dask
    scheduler's address)."""

    level: float = DEFAULT_LEVEL
    draws: int = 0
    seed: int | None = None
    scheduler: str | None = None
    workers: int | None = None

    def summary_of(self, result: StudyResult) -> dict[str, object] | None:
        """``confidence_region`` of ``result`` as ``Confidence.summary``, None for 0 draws."""
        if not self.draws:
            return None
        with make_executor(self.scheduler, workers=self.workers) as executor:
            region = confidence_region(
                result, level=self.level, draws=self.draws, seed=self.seed, executor=executor
            )
        return region.summary()


def region_lines(confidence: Mapping[str, Any], beta: Sequence[float]) -> list[str]:
    """A region (``Confidence.summary``, as a result or ``simulate --json`` carries it) in
    words, for ``simulate``, ``run status --wait`` and the demo: the radius, then each
    coordinate's β̂ (d,) and interval (a null end, from draws that diverged, as ±inf)."""

    def shown(value: float | None, default: str) -> str:
        return default if value is None else f"{value:.3f}"

    radius = confidence["radius"]
    level = f"{100 * confidence['level']:g}%"
    lines = [
        f"{level} confidence region ({confidence['method']}, {confidence['draws']} draws): "
        f"‖β − β̂‖ ≤ {shown(radius, 'inf')}"
    ]
    for j, (value, low, high) in enumerate(
        zip(beta, confidence["low"], confidence["high"], strict=True)
    ):
        lines.append(f"  β[{j}] = {value:.3f}  [{shown(low, '-inf')}, {shown(high, 'inf')}]")
    return lines
