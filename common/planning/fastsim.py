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
  hospital's records are drawn in blocks with the model's own ``sample_records``, from a
  generator of their own (``ldpem.common.planning.seed_records``), and round t takes the
  next rows of each: no permutation, no gather.
* **Gradients by chunks of rows**, each chunk's arrays in the cache
  (``ldpem.common.planning.holder_sum``).
* **Truncated sums by a table** (``ldpem.common.planning.truncation_sum``): the same function T to
  ~1e-8·s, without the constant-time evaluation real records need (noise shares: the sum
  then put on their fine grid, ``holder_sum``).

What stays ``run_study``'s own: β* (``Model.draw_parameter``, the first draw of the seed's
generator, so the same β* as ``run_study`` for a seed), β⁰, the hospitals' sizes (given,
or ``random_holder_sizes``), the round sizes of the schedule, the mechanisms
(``study_mechanisms``), each holder's noise (``Mechanism.finish_sum``), the M-step with
the central noise (``protocol.m_step``) and the reported estimate
(``protocol.final_estimate``). The numbers differ from ``run_study``'s for the same seed
(other draws); their distribution is the same, which tests/common/test_fastsim.py checks on
a grid of models and mechanisms. Studies it
does not cover — records reused every round, gross outliers, dropouts — run through
``run_study`` itself, so every study is accepted.

**Shared draws.** A seed's records and the generator of its noise come from the seed
alone, not from the mechanism, rounds, schedule or reported estimate run on them, and the
reported estimate draws nothing. So ``shared_final_errors`` runs several studies of the
same data (the plan's mechanisms; the schedule search's settings) on one draw of each
seed's records, and each study once for all its reported estimates: every study's errors
are those it has run alone, number for number, at the cost of the records' draw once
(common random numbers: the studies' errors are correlated seed by seed, each one's
distribution unchanged).

Seeds are mapped in batches (``BATCH`` seeds a task) on an ``ldpem.common.planning.executor``; each
seed's result depends on the seed alone, not on the executor.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpem.common.core.errors import UserError
from ldpem.common.models import Model
from ldpem.common.models.base import Draw
from ldpem.common.planning.executor import Executor, SerialExecutor
from ldpem.common.planning.holder_sum import holder_total
from ldpem.common.planning.seed_records import SeedRecords
from ldpem.common.planning.simulator import RoundMechanisms, random_holder_sizes
from ldpem.common.planning.study import (
    Dataset,
    Study,
    check_size,
    check_study,
    given_sizes,
    per_hospital,
    run_study,
    study_mechanisms,
    study_model,
)
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
    "shared_final_errors",
    "simulate",
]

FloatArray = NDArray[np.float64]

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
        study's own, the model's ``draw_parameter`` (norm snr·σ) from the seed.
    beta0 : array-like of shape (d,), optional
        The start β⁰; default: a random direction of norm σ, as ``run_study``'s.

    Returns
    -------
    FastRun
        The reported estimate (d,), β* (d,) and the model's error between them (+inf when
        the estimate is not finite).
    """
    check_study(study, synthetic=True)
    model = study_model(study)
    if not fast_path(study):
        return _reference(study, model, beta_star, beta0)
    data = _draw(study, model, beta_star, beta0, keep=False)  # one study reads them
    betas, variances = _trajectory(study, model, data)
    final = final_estimate(
        betas, variances, final=study.final, sign_invariant=model.sign_invariant
    ).beta
    return FastRun(final, data.star, _error(model, final, data.star))


@dataclass(frozen=True)
class _Data:
    """One seed's draws that do not depend on the mechanism or the rounds: β*, β⁰, the
    hospitals' sizes and every hospital's records, and the generator of the run's noise
    (copied for each study run on them, so that each run's noise is its seed's alone)."""

    star: FloatArray
    beta0: FloatArray
    sizes: tuple[int, ...]
    records: SeedRecords
    noise: np.random.Generator


def _data_key(study: Study) -> tuple[object, ...]:
    """What ``_draw`` reads of a study besides its seed: studies with equal keys run on the
    same records for the same seed."""
    return (
        study.model,
        study.d,
        study.sigma,
        study.snr,
        study.missing,
        study.n,
        study.sizes,
        study.hospitals,
        study.model_options,
    )


def _draw(
    study: Study,
    model: Model,
    beta_star: ArrayLike | None,
    beta0: ArrayLike | None,
    *,
    keep: bool,
) -> _Data:
    """``study``'s data at its seed: β* (``draw_parameter``, the first draw of the seed's
    generator, as ``run_study``'s), β⁰, the sizes (given, or ``random_holder_sizes``),
    then two generators spawned from the seed's: the records' (one SFC64 child per
    hospital, ``SeedRecords``, kept when ``keep``: several studies read them) and the
    noise's."""
    rng = study_rng(study.seed)
    d = study.d
    missing = study.missing if study.missing is not None else _model_missing(model)
    if missing and not model.allows_missing:
        raise UserError(f"missing must be 0 for model {model.name}, got {missing!r}")
    size = model.parameter_dim(d)
    if beta_star is None:
        star = model.draw_parameter(d, snr=study.snr, sigma=study.sigma, rng=rng)
    else:
        star = _vector("beta_star", beta_star, size)
    check_size(study.n, study, given_sizes(study, None))
    if beta0 is None:
        beta = initial_beta(d, study.sigma, rng, model=model)
    else:
        beta = _vector("beta0", beta0, size)
    sizes = study.sizes
    if sizes is None:
        sizes = (study.n,)
        if study.hospitals > 1:
            minimum = per_hospital(study)
            sizes = tuple(random_holder_sizes(study.n, study.hospitals, minimum, rng))
    draws, noise = rng.spawn(2)
    # The records' generators are SFC64 on the children ``draws.spawn`` would seed: numpy's
    # fastest bit generator, its Gaussians ~20% cheaper than PCG64's, which are most of a
    # simulation's time (docs/PERFORMANCE.md, "One simulated study, second pass").
    parent = draws.bit_generator.seed_seq
    assert isinstance(parent, np.random.SeedSequence)  # study_rng's, spawned
    generators = [np.random.Generator(np.random.SFC64(child)) for child in parent.spawn(len(sizes))]
    records = SeedRecords(
        model, generators, sizes, star=star, sigma=study.sigma, missing=missing, keep=keep
    )
    return _Data(star, beta, tuple(sizes), records, noise)


#: A study's rounds on given sizes (``_setup``): each round's mechanisms, each hospital's
#: records in each round (K, T) and the row where each starts (K, T + 1).
_Setup = tuple[tuple[RoundMechanisms, ...], NDArray[np.int64], NDArray[np.int64]]


def _setup(study: Study, model: Model, sizes: tuple[int, ...]) -> _Setup:
    """What ``_trajectory`` needs of ``study`` besides its seed's data, for hospitals of
    ``sizes``: its mechanisms (``study_mechanisms``, calibrated once for all its seeds)
    and its schedule's rows."""
    d = study.d
    delta = study_delta(study.delta, study.n)
    bound = study_beta_bound(study.beta_bound, snr=study.snr, sigma=study.sigma)
    tau = study_tau(model, tau=study.tau, beta_bound=bound, sigma=study.sigma, d=d)
    plans = study_mechanisms(study, sizes, d=d, delta=delta, tau=tau)
    per_round = np.array([round_sizes(size, study.rounds, study.schedule) for size in sizes])
    starts = np.cumsum(np.pad(per_round, ((0, 0), (1, 0))), axis=1)
    return plans, per_round, starts


def _trajectory(
    study: Study, model: Model, data: _Data, setup: _Setup | None = None
) -> tuple[list[FloatArray], list[float]]:
    """The iterates β⁰ … β^T of ``study`` run on ``data`` (each round's records the next
    rows of each hospital's, as the schedule deals them) and each round's noise variance
    v_t: everything a reported estimate (``final_estimate``) is computed from, whatever
    ``study.final`` is (it draws nothing). ``setup``: ``_setup`` for ``data.sizes``."""
    rng = copy.deepcopy(data.noise)
    plans, per_round, starts = setup if setup is not None else _setup(study, model, data.sizes)
    reader = data.records.reader()
    beta = data.beta0
    betas = [beta]
    variances: list[float] = []
    for t, plan in enumerate(plans):
        if not np.all(np.isfinite(beta)):
            raise ValueError("beta must be finite, got NaN or inf")
        totals = [
            holder_total(
                model,
                mechanism,
                beta,
                reader.chunks(k, int(starts[k, t]), int(starts[k, t + 1])),
                study.sigma,
                rng,
            )
            for k, mechanism in enumerate(plan.holders)
        ]
        counts: list[int] = per_round[:, t].tolist()
        step = m_step(beta, totals, counts, eta=study.eta, central=plan.central, rng=rng)
        beta = step.beta
        declared = [report_noise_std(m) for m in plan.holders]
        variances.append(round_noise_variance(plan.holders[0], counts, declared, plan.central))
        betas.append(beta)
    return betas, variances


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
        star = _vector("beta_star", beta_star, model.parameter_dim(study.d))
        missing = study.missing if study.missing is not None else _model_missing(model)
        rng = study_rng(study.seed)
        draw = Draw(n=study.n, beta_star=star, sigma=study.sigma, missing=missing, rng=rng)
        data = Dataset(model.sample_records(draw), star)
        study = replace(study, seed=int(rng.integers(2**62)))
    start = None if beta0 is None else _vector("beta0", beta0, model.parameter_dim(study.d))
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
    size = study_model(study).parameter_dim(study.d)
    star = None if beta_star is None else _vector("beta_star", beta_star, size)
    start = None if beta0 is None else _vector("beta0", beta0, size)
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
    """``final_errors`` of ``study`` under each reported estimate of ``finals``, shape
    (len(finals), len(seeds)) (``shared_final_errors`` of one study)."""
    return shared_final_errors([(study, finals)], seeds)[0]


def shared_final_errors(
    cases: Sequence[tuple[Study, Sequence[str]]], seeds: Sequence[int]
) -> list[FloatArray]:
    """For studies of the same data (model, d, σ, snr, sizes: ``_data_key``; their own
    seeds ignored), each study's errors under each of its reported estimates at each seed:
    one array per case, of shape (len(finals), len(seeds)), whose row i is
    ``final_errors(replace(study, final=finals[i]), seeds)`` number for number.

    On the fast path each seed's records are drawn once for every study and each study
    simulated once for all its rules: a seed's records and noise do not depend on the
    mechanism, rounds or schedule run on them, nor a run on its final rule. Off the fast
    path each rule is ``run_study``'s own runs. ValueError when the studies' data differ."""
    keys = {_data_key(study) for study, _ in cases}
    if len(keys) > 1:
        raise ValueError("shared_final_errors needs studies of the same data")
    for study, finals in cases:
        for final in (study.final, *finals):
            check_study(replace(study, final=final), synthetic=True)
        check_size(study.n, study, given_sizes(study, None))
    found = [np.empty((len(finals), len(seeds))) for _, finals in cases]
    fast = [j for j, (study, _) in enumerate(cases) if fast_path(study)]
    for j, (study, finals) in enumerate(cases):
        if j not in fast:
            rows = [final_errors(replace(study, final=final), seeds) for final in finals]
            found[j][:] = np.array(rows, dtype=np.float64).reshape(len(finals), len(seeds))
    setups: dict[tuple[int, tuple[int, ...]], _Setup] = {}
    for column, seed in enumerate(seeds):
        data = None
        for j in fast:
            study, finals = cases[j]
            seeded = replace(study, seed=int(seed))
            model = study_model(study)
            if data is None:  # kept only when several studies read them
                data = _draw(seeded, model, None, None, keep=len(fast) > 1)
            if (j, data.sizes) not in setups:
                setups[(j, data.sizes)] = _setup(study, model, data.sizes)
            betas, variances = _trajectory(seeded, model, data, setups[(j, data.sizes)])
            for row, final in enumerate(finals):
                reported = final_estimate(
                    betas, variances, final=final, sign_invariant=model.sign_invariant
                )
                found[j][row, column] = _error(model, reported.beta, data.star)
    return found
