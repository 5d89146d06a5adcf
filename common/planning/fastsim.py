"""Fast simulated studies: the distribution of ``run_study``'s estimate, at a fraction of its cost.

The predictions (``ldpem.common.planning.prediction``: the forecast of ``run create``, ``ldpem
plan``, its schedule search) and the parametric bootstrap need many simulated runs of one
study and only their reported estimates. ``run_study`` is the reference: it draws all n
records, deals them to hospitals and rounds by random permutations and gathers
(``Records.take``), and truncates with the constant-time ``smoothed_truncation`` a holder
runs (docs/PERFORMANCE.md). ``runs`` runs the same study with the same
distribution of every random quantity, by three changes that do not alter it:

* **No dealing.** Synthetic records are i.i.d. given β*, so any fixed split of them into
  hospitals and rounds has the distribution of ``run_study``'s random permutations. Each
  round's records (every hospital's round-t group, one after the other) are drawn when the
  round starts, with the model's own ``sample_records``: no copy, no gather, and only one
  round's records in memory.
* **One gradient call per round**, the hospitals' rows as slices of it.
* **Truncated sums by a table** (``ldpem.common.planning.truncation_sum``): the same function T to
  ~1e-8·s, without the constant-time evaluation real records need (noise shares: the sum
  then put on their fine grid, ``_holder_sum``).

What stays ``run_study``'s own: β* (``true_parameter``, the first draw of the seed's
generator, so the same β* as ``run_study`` for a seed), β⁰, the hospitals' sizes (given,
or ``random_holder_sizes``), the round sizes of the schedule, the mechanisms
(``study_mechanisms``), each holder's noise (``Mechanism.finish_sum``), the M-step with
the central noise (``protocol.m_step``) and the reported estimate
(``protocol.final_estimate``). The numbers differ from ``run_study``'s for the same seed
(other draws); their distribution is the same, which tests/common/test_fastsim.py checks on
a grid of models and mechanisms. A mechanism other than the truncations (clipping, none)
sums its holders' contributions with its own ``partial_sum``. Studies it
does not cover — records reused every round, gross outliers, dropouts — run through
``run_study`` itself, so every study is accepted.

Seeds are mapped in batches (``BATCH`` seeds a task) on an ``ldpem.common.planning.executor``; each
seed's result depends on the seed alone, not on the executor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpem.common.core.errors import UserError
from ldpem.common.core.secagg_quantize import FINE_BITS
from ldpem.common.core.truncation import smoothed_truncation
from ldpem.common.mechanisms import Mechanism, SharedNoise, sum_arithmetic
from ldpem.common.mechanisms.local import LocalTruncation
from ldpem.common.mechanisms.secagg import SecAggSkellam
from ldpem.common.models import Model, get_model
from ldpem.common.models._synthetic import true_parameter
from ldpem.common.models.base import Draw
from ldpem.common.planning.executor import Executor, SerialExecutor
from ldpem.common.planning.simulation import random_holder_sizes
from ldpem.common.planning.study import Dataset, Study, run_study, study_mechanisms
from ldpem.common.planning.study_checks import check_size, check_study, given_sizes, per_hospital
from ldpem.common.planning.truncation_sum import truncated_sum
from ldpem.common.protocol import (
    final_estimate,
    initial_beta,
    m_step,
    report_noise_std,
    round_noise_variance,
    round_sizes,
    study_beta_bound,
    study_delta,
    study_rng,
    study_tau,
)

__all__ = [
    "BATCH",
    "FastRun",
    "fast_path",
    "final_errors",
    "final_errors_by_rule",
    "final_estimates",
    "runs",
    "simulate",
]

FloatArray = NDArray[np.float64]

#: Values (records × d) drawn and truncated at once: the arrays of one chunk stay in the
#: cache, and the per-chunk overhead is small against its work.
CHUNK = 1 << 15
#: Seeds one task of the executor runs (fewer, larger tasks: less pickling and start-up).
BATCH = 5


@dataclass(frozen=True)
class FastRun:
    """One simulated run: the reported estimate (d,), the true β* (d,) and its error."""

    estimate: FloatArray
    beta_star: FloatArray
    error: float


def fast_path(study: Study) -> bool:
    """Whether ``study`` runs on the fast path (module docstring); otherwise ``simulate``
    runs ``run_study`` itself."""
    return not study.reuse and study.outliers == 0.0 and study.dropout == 0.0


#: Values a mechanism's contributions are probed at (``_tabled``): zero, tiny, moderate,
#: large and huge, both signs.
_PROBE = np.array([[0.0, 1e-9, 0.3, -0.7, 2.5, -40.0, 1e6, -1e300]])
_TABLED: dict[type[Mechanism], bool] = {}


def _tabled(mechanism: Mechanism) -> bool:
    """Whether ``mechanism`` contributes the smoothed truncation of each gradient at its
    scale and smoothing (local, hospital, central, noise shares), which the table sums:
    its class's ``contributions`` are probed once against ``smoothed_truncation``."""
    if not isinstance(mechanism, LocalTruncation):
        return False
    kind = type(mechanism)
    if kind not in _TABLED:
        expected = smoothed_truncation(_PROBE, mechanism.scale, mechanism.smoothing)
        _TABLED[kind] = bool(np.array_equal(mechanism.contributions(_PROBE.copy()), expected))
    return _TABLED[kind]


def _holder_sum(mechanism: Mechanism, gradients: FloatArray) -> NDArray[Any]:
    """Σ of a holder's contributions before its noise, (m, d) → (d,), in the mechanism's
    arithmetic (``sum_arithmetic``); ``gradients`` is scratch. A truncation's sum comes
    from the table; for noise shares it is then put on their fine grid
    (``secagg.quantize.fine_sum``'s integers, here rint of the float sum in fine units
    instead of the sum of each record's rint: they differ by at most m/2 fine units,
    m·γ·2⁻³¹, far below the grid γ the sum is rounded to); any other mechanism sums with
    its own arithmetic's ``partial_sum``."""
    arithmetic = sum_arithmetic(mechanism)
    if not _tabled(mechanism):
        return arithmetic.partial_sum(gradients)
    assert isinstance(mechanism, LocalTruncation)
    total = truncated_sum(gradients, mechanism.scale, mechanism.smoothing)
    if isinstance(mechanism, SecAggSkellam):
        fine = np.rint(total / (mechanism.grid * 2.0**-FINE_BITS))
        return np.array([int(v) for v in fine], dtype=object)
    if isinstance(mechanism, SharedNoise):
        return arithmetic.partial_sum(gradients)
    return total


def _holder_total(
    model: Model,
    mechanism: Mechanism,
    beta: FloatArray,
    count: int,
    star: FloatArray,
    sigma: float,
    missing: float,
    rng: np.random.Generator,
) -> FloatArray:
    """What one holder sends in a round of ``count`` records: its records drawn at β*
    chunk by chunk (each chunk's arrays stay in the cache), their gradients at β summed as
    the mechanism sums them, then ``finish_sum`` (its noise)."""
    d = star.size
    rows = max(1, CHUNK // d)
    arithmetic = sum_arithmetic(mechanism)
    total = arithmetic.empty_sum(d)
    for start in range(0, count, rows):
        size = min(rows, count - start)
        draw = Draw(n=size, beta_star=star, sigma=sigma, missing=missing, rng=rng)
        records = model.sample_records(draw)
        with np.errstate(all="ignore"):  # as holder_round: the mechanism bounds ±inf and NaN
            gradients = model.gradients(beta, records, sigma)
        total = total + _holder_sum(mechanism, gradients)
    return arithmetic.finish_sum(total, count, rng)


def simulate(
    study: Study,
    *,
    beta_star: ArrayLike | None = None,
    beta0: ArrayLike | None = None,
) -> FastRun:
    """One run of ``study`` (its seed) on the fast path, or by ``run_study`` when the
    fast path does not cover it (``fast_path``).

    Parameters
    ----------
    study : Study
        A synthetic study (model, mechanism, n, d, budget, hospitals or sizes, schedule,
        final rule, seed).
    beta_star : array-like of shape (d,), optional
        The true parameter to draw the records at (the bootstrap's β̂); default: the
        study's own, ``true_parameter`` of norm snr·σ from the seed.
    beta0 : array-like of shape (d,), optional
        The start β⁰; default: a random direction of norm σ, as ``run_study``'s.

    Returns
    -------
    FastRun
        The reported estimate (d,), β* (d,) and the model's error between them (+inf when
        the estimate is not finite).
    """
    check_study(study, synthetic=True)
    model = get_model(study.model)
    if not fast_path(study):
        return _reference(study, model, beta_star, beta0)
    betas, variances, star = _trajectory(study, model, beta_star, beta0)
    final = final_estimate(
        betas, variances, final=study.final, sign_invariant=model.sign_invariant
    ).beta
    return FastRun(final, star, _error(model, final, star))


def _trajectory(
    study: Study, model: Model, beta_star: ArrayLike | None, beta0: ArrayLike | None
) -> tuple[list[FloatArray], list[float], FloatArray]:
    """The iterates β⁰ … β^T of a fast-path run of ``study`` (``simulate``), each round's
    noise variance v_t and β*: everything a reported estimate (``final_estimate``) is
    computed from, whatever ``study.final`` is (it draws nothing)."""
    rng = study_rng(study.seed)
    d = study.d
    missing = study.missing if study.missing is not None else _model_missing(model)
    if missing and not model.allows_missing:
        raise UserError(f"missing must be 0 for model {model.name}, got {missing!r}")
    if beta_star is None:
        star = true_parameter(d, snr=study.snr, sigma=study.sigma, rng=rng)
    else:
        star = _vector("beta_star", beta_star, d)
    check_size(study.n, study, given_sizes(study, None))
    delta = study_delta(study.delta, study.n)
    bound = study_beta_bound(study.beta_bound, snr=study.snr, sigma=study.sigma)
    tau = study_tau(model.name, tau=study.tau, beta_bound=bound, sigma=study.sigma, d=d)
    beta = initial_beta(d, study.sigma, rng) if beta0 is None else _vector("beta0", beta0, d)
    sizes = study.sizes
    if sizes is None:
        sizes = (study.n,)
        if study.hospitals > 1:
            minimum = per_hospital(study)
            sizes = tuple(random_holder_sizes(study.n, study.hospitals, minimum, rng))
    plans = study_mechanisms(study, sizes, d=d, delta=delta, tau=tau)
    per_round = np.array([round_sizes(size, study.rounds, study.schedule) for size in sizes]).T
    betas = [beta]
    variances: list[float] = []
    for plan, counts in zip(plans, per_round, strict=True):
        if not np.all(np.isfinite(beta)):
            raise ValueError("beta must be finite, got NaN or inf")
        totals = [
            _holder_total(model, mechanism, beta, int(count), star, study.sigma, missing, rng)
            for mechanism, count in zip(plan.holders, counts, strict=True)
        ]
        step = m_step(beta, totals, counts.tolist(), eta=study.eta, central=plan.central, rng=rng)
        beta = step.beta
        declared = [report_noise_std(m) for m in plan.holders]
        variances.append(round_noise_variance(plan.holders[0], counts, declared, plan.central))
        betas.append(beta)
    return betas, variances, star


def _model_missing(model: Model) -> float:
    """The share of missing covariates of a study that does not say (``Study.missing``)."""
    return 0.1 if model.allows_missing else 0.0


def _vector(name: str, value: ArrayLike, d: int) -> FloatArray:
    vector = np.array(value, dtype=np.float64)
    if vector.shape != (d,) or not np.all(np.isfinite(vector)):
        raise ValueError(f"{name} must be {d} finite numbers, got shape {vector.shape}")
    return vector


def _error(model: Model, estimate: FloatArray, star: FloatArray) -> float:
    error = model.error(estimate, star)
    return error if math.isfinite(error) else math.inf


def _reference(
    study: Study, model: Model, beta_star: ArrayLike | None, beta0: ArrayLike | None
) -> FastRun:
    """A study off the fast path, by ``run_study`` (records drawn at ``beta_star`` when
    given, with the model's generator)."""
    data = None
    if beta_star is not None:
        star = _vector("beta_star", beta_star, study.d)
        missing = study.missing if study.missing is not None else _model_missing(model)
        rng = study_rng(study.seed)
        draw = Draw(n=study.n, beta_star=star, sigma=study.sigma, missing=missing, rng=rng)
        data = Dataset(model.sample_records(draw), star)
        study = replace(study, seed=int(rng.integers(2**62)))
    start = None if beta0 is None else _vector("beta0", beta0, study.d)
    result = run_study(study, data=data, beta0=start)
    assert result.beta_star is not None  # synthetic data: β* is known
    star = result.beta_star
    return FastRun(result.estimate, star, _error(model, result.estimate, star))


_Task = tuple[Study, tuple[int, ...], FloatArray | None, FloatArray | None]


def _batch(task: _Task) -> list[FastRun]:
    """One executor task: the runs of ``study`` at each of the seeds. Module level: a
    process pool runs it."""
    study, seeds, beta_star, beta0 = task
    return [simulate(replace(study, seed=s), beta_star=beta_star, beta0=beta0) for s in seeds]


def runs(
    study: Study,
    seeds: Sequence[int],
    *,
    executor: Executor | None = None,
    beta_star: ArrayLike | None = None,
    beta0: ArrayLike | None = None,
) -> list[FastRun]:
    """``simulate`` of ``study`` at each seed (its own seed ignored), in the seeds' order,
    in batches of ``BATCH`` seeds on ``executor``: each run's estimate has the distribution
    of ``run_study``'s for ``replace(study, seed=s)`` (module docstring).

    Parameters
    ----------
    study : Study
        The study (its seed is replaced by each of ``seeds``).
    seeds : sequence of int
        One run per seed.
    executor : Executor, optional
        Where the batches run (default: in this process, one after the other).
    beta_star : array-like of shape (d,), optional
        Draw every run's records at this β* (the parametric bootstrap's β̂).
    beta0 : array-like of shape (d,), optional
        Start every run at this β⁰.

    Returns
    -------
    list of FastRun
        One per seed, in the seeds' order.
    """
    star = None if beta_star is None else _vector("beta_star", beta_star, study.d)
    start = None if beta0 is None else _vector("beta0", beta0, study.d)
    seeds = [int(s) for s in seeds]
    tasks = [(study, tuple(seeds[i : i + BATCH]), star, start) for i in range(0, len(seeds), BATCH)]
    chosen = executor if executor is not None else SerialExecutor()
    return [run for batch in chosen.map(_batch, tasks) for run in batch]


def final_estimates(found: Sequence[FastRun], d: int) -> FloatArray:
    """The reported estimates of ``found`` (``runs``), shape (len(found), d): β^T, or the
    average the study's ``final`` asks, per run."""
    return np.array([run.estimate for run in found], dtype=np.float64).reshape(len(found), d)


def final_errors(study: Study, seeds: Sequence[int]) -> FloatArray:
    """The error of each seed's reported estimate against its β* (up to the model's
    sign symmetry; +inf for a run that diverged), shape (len(seeds),), the runs in this
    process at each seed's own β* (``runs`` takes an executor, β* or β⁰ when needed)."""
    return np.array([run.error for run in runs(study, seeds)], dtype=np.float64)


def final_errors_by_rule(study: Study, seeds: Sequence[int], finals: Sequence[str]) -> FloatArray:
    """``final_errors`` of ``study`` with each reported estimate of ``finals`` in its place,
    shape (len(finals), len(seeds)): row j is ``final_errors(replace(study, final=finals[j]),
    seeds)`` number for number. On the fast path each seed's run is simulated once and
    every final rule computed from its iterates (the rule draws nothing and does not change
    the run); off it, each rule's runs are ``run_study``'s."""
    for final in finals:
        check_study(replace(study, final=final), synthetic=True)
    model = get_model(study.model)
    if not fast_path(study):
        rows = [final_errors(replace(study, final=final), seeds) for final in finals]
        return np.array(rows, dtype=np.float64).reshape(len(finals), len(seeds))
    check_study(study, synthetic=True)
    errors = np.empty((len(finals), len(seeds)))
    for column, seed in enumerate(seeds):
        betas, variances, star = _trajectory(replace(study, seed=int(seed)), model, None, None)
        for row, final in enumerate(finals):
            estimate = final_estimate(
                betas, variances, final=final, sign_invariant=model.sign_invariant
            ).beta
            errors[row, column] = _error(model, estimate, star)
    return errors
