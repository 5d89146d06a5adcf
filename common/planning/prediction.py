"""The one prediction of a run's accuracy, from seeded in-process simulations.

Everything that states what a run should reach goes through ``predict_many``: the forecast
of ``run create`` (``ldpem.server.forecast``, which the status page and the demo show),
``ldpem plan`` (its table, its sensitivity to the SNR and its crossover search,
``ldpem.common.planning.crossover``) and the warning of ``ldpem simulate --data``.

A ``Problem`` is the public description of a run: model, d, σ, budget, rounds and the
hospitals' record counts. One simulation is the study of ``Problem.study``
(``ldpem.common.planning.study``): synthetic data of that model (‖β*‖ = snr·σ), split over the
hospitals with the given counts, run with the mechanism each agent would build. It runs on
the fast path (``ldpem.common.planning.fastsim``): the distribution of ``ldpem simulate``'s final
error for that study, not its numbers seed for seed.

A ``Prediction`` is the final errors of ``seeds`` such simulations, with seeds
``first_seed(problem)``, ``first_seed(problem) + 1``, …: drawn from the problem itself
(a hash of its fields, above ``PREDICTION_SEED_BASE``), so that two problems do not share
the luck of the same seeds and a prediction is reproducible; far above any seed a person
types (0, 1, 42, a date), so a check against "fresh" runs with small seeds never reuses
its draws. The fields that the schedule search varies (rounds, schedule, reported
estimate) and the mechanism are left out of the hash: settings and mechanisms compared
on one problem see the same seeds (``schedule_search.paired_gain``).

Its band is a predictive interval for one new run: the 10–90% quantiles of the S errors
taken at ranks p·(S+1) (``quantile``), so that on average it covers 80% of new runs,
with its own finite S allowed for. The share one band covers still varies with its seeds
(a Beta share, standard deviation √(0.16/(S+2)), ``band_spread``): ± 4.0% with the
planner's ``DEFAULT_SEEDS``, ± 2.8% with the forecast's 200
(``server.forecast.FORECAST_SEEDS``); 20 seeds gave ± 8.5%, and the band of about one
problem in four then covered less than 70% or more than 90% of new runs (issue 43). The
sensitivity to the SNR, the crossover and schedule searches only compare means: they use
``SEARCH_SEEDS``, and the what-ifs at other SNRs ``SENSITIVITY_SEEDS``.
The seeds run in batches on an ``ldpem.common.planning.executor`` (this machine's cores by
default); each seed's result depends on the seed alone, not on the executor. Predictions
made together share their runs (``ldpem.common.planning.simulation_cache``): a seed's
records are drawn once for every mechanism and schedule of one problem, and a run serves
all its reported estimates; the figures are those of each prediction made alone, and
the mechanisms and settings of one problem are compared on the same records.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ldpem.common.core._validation import check_count
from ldpem.common.planning.executor import Executor, make_executor
from ldpem.common.planning.problem import BEAT_FRACTION, Problem
from ldpem.common.planning.simulation_cache import SimulationCache

__all__ = [
    "BAND",
    "BEAT_FRACTION",
    "DEFAULT_SEEDS",
    "PREDICTION_SEED_BASE",
    "SEARCH_SEEDS",
    "SEED_SPAN",
    "SENSITIVITY_SEEDS",
    "SNR_FACTORS",
    "Outlook",
    "Prediction",
    "Problem",
    "band_spread",
    "first_seed",
    "outlooks",
    "predict",
    "predict_many",
    "prediction_seeds",
    "quantile",
]

#: Every prediction's seeds are at least this (module docstring: why so high).
PREDICTION_SEED_BASE = 1_000_000_000
#: A problem's first seed is PREDICTION_SEED_BASE plus its hash modulo this.
SEED_SPAN = 10**12
#: Simulations behind a prediction's band unless asked otherwise (``ldpem plan``). S + 1 is
#: a multiple of 10, so the band's ends are order statistics (the 10th and the 90th of the
#: sorted errors, ranks p·(S+1)), and the share of new runs it covers is exactly Beta(80,
#: 20): 80% on average, ± 4.0% from one problem to another, between 70% and 90% for 98.8%
#: of problems, and for all four of issue 43's cases at once with probability 0.95 (20
#: seeds: ± 8.5%, 78% of problems; 59: ± 5.1%, 95%, four at once 0.82). Not the forecast's
#: 200 (``server.forecast.FORECAST_SEEDS``): the plan simulates six mechanisms at the
#: planned n, not one, and 200 of each at 2·10⁵ records are ~40 s of CPU, more than the
#: plan's 15 s on two cores (docs/PERFORMANCE.md, "The plan's bands").
DEFAULT_SEEDS = 99
#: Simulations behind a figure that is only compared (the SNR sensitivity, the crossover
#: and schedule searches): their means, not their bands.
SEARCH_SEEDS = 20
#: Simulations behind each mean at half and twice the assumed SNR (a what-if shown beside
#: the band, and the forecast's warning when half the SNR would do no better than β = 0).
SENSITIVITY_SEEDS = 10
#: The band's quantiles.
BAND = (0.1, 0.9)
#: The planner and the forecast also simulate ‖β*‖/σ at these multiples of the assumed
#: value: the SNR is an assumption, and the error depends on it.
SNR_FACTORS = (0.5, 2.0)


def band_spread(seeds: int) -> float:
    """The standard deviation, from one problem to another, of the share of new runs that
    a band from ``seeds`` simulations covers: that share is a Beta variable of mean
    BAND[1] − BAND[0] = 0.8 and S + 1 = ``seeds`` + 1 in all (the k-th of S sorted draws
    cuts off a Beta(k, S + 1 − k) share), so √(0.8·0.2/(S + 2))."""
    width = BAND[1] - BAND[0]
    return math.sqrt(width * (1.0 - width) / (check_count("seeds", seeds) + 2))


def quantile(errors: Sequence[float], p: float) -> float:
    """The p-quantile of ``errors`` at rank p·(S+1) of S sorted values, interpolated
    (numpy's ``weibull`` method; +inf allowed). Why that rank: the k-th smallest of S
    draws lies below a fraction k/(S+1) of the distribution on average, so the band
    between the BAND quantiles covers 80% of new runs on average; the default linear
    rank (p·(S−1)) gives a band that covers only ~72% with 20 seeds."""
    ordered = sorted(errors)
    if not ordered:
        raise ValueError("no errors to take a quantile of")
    rank = min(max(p * (len(ordered) + 1) - 1.0, 0.0), len(ordered) - 1.0)
    below = math.floor(rank)
    above = min(below + 1, len(ordered) - 1)
    low, high = ordered[below], ordered[above]
    if low == high or rank == below:
        return low
    return low + (rank - below) * (high - low)


@dataclass(frozen=True)
class Prediction:
    """The final errors of ``mechanism`` on ``problem`` (as simulated: with a run scaled
    down, its smaller sizes) over seeds ``first_seed`` … ``first_seed + seeds − 1``
    (+inf for a run that diverged)."""

    mechanism: str
    problem: Problem
    errors: tuple[float, ...]
    first_seed: int = PREDICTION_SEED_BASE

    @property
    def seeds(self) -> int:
        """How many simulations (seeds) the prediction rests on."""
        return len(self.errors)

    @property
    def mean(self) -> float:
        """The expected final error (+inf if any simulation diverged)."""
        if not all(math.isfinite(e) for e in self.errors):
            return math.inf
        return float(np.mean(self.errors))

    @property
    def low(self) -> float:
        """The band's lower end: 10% of runs should end below it."""
        return quantile(self.errors, BAND[0])

    @property
    def high(self) -> float:
        """The band's upper end: 10% of runs should end above it."""
        return quantile(self.errors, BAND[1])

    def summary(self) -> dict[str, object]:
        """The JSON-able figures: mean, band, seeds and the simulated size and SNR."""
        return {
            "mean": self.mean,
            "p10": self.low,
            "p90": self.high,
            "seeds": self.seeds,
            "first_seed": self.first_seed,
            "n": self.problem.n,
            "snr": self.problem.snr,
            "trivial_error": self.problem.trivial_error,
        }


@dataclass(frozen=True)
class Outlook:
    """A mechanism's prediction at the assumed ‖β*‖/σ, and at ``SNR_FACTORS`` times it."""

    prediction: Prediction
    sensitivity: tuple[Prediction, ...]


def first_seed(problem: Problem) -> int:
    """The first prediction seed of ``problem`` (module docstring): PREDICTION_SEED_BASE
    plus a BLAKE2b hash of ``Problem.seed_key`` modulo SEED_SPAN."""
    digest = hashlib.blake2b(problem.seed_key.encode(), digest_size=8).digest()
    return PREDICTION_SEED_BASE + int.from_bytes(digest, "big") % SEED_SPAN


def prediction_seeds(problem: Problem, count: int) -> range:
    """The seeds of a prediction of ``problem`` from ``count`` simulations."""
    first = first_seed(problem)
    return range(first, first + check_count("seeds", count))


def predict_many(
    cases: Sequence[tuple[Problem, str]],
    *,
    seeds: int | Sequence[int] = DEFAULT_SEEDS,
    max_records: int | None = None,
    executor: Executor | None = None,
    cache: SimulationCache | None = None,
) -> list[Prediction]:
    """A prediction for each (problem, mechanism) of ``cases``, all their simulations
    mapped as one batch of tasks (so that every worker stays busy across cases).

    Cases that differ only in their reported estimate share their runs, and ``cache``
    keeps runs for later calls (``ldpem.common.planning.simulation_cache``): the
    predictions are the same numbers as without it.

    Parameters
    ----------
    cases : sequence of (Problem, str)
        What to predict: a problem and a mechanism name.
    seeds : int or sequence of int
        Simulations per case (``prediction_seeds``), or one count per case.
    max_records : int, optional
        Above it, a problem's hospitals are scaled down in proportion (which only makes
        the prediction pessimistic) and the mechanisms calibrated for the smaller run.
    executor : Executor, optional
        Where the simulations run; default: a pool of this machine's cores, closed after.
    cache : SimulationCache, optional
        Runs already simulated, taken from it, and where new ones are recorded (default:
        this call's own).

    Returns
    -------
    list of Prediction
        In the order of ``cases``.
    """
    counts = [seeds] * len(cases) if isinstance(seeds, int) else [int(c) for c in seeds]
    if len(counts) != len(cases):
        raise ValueError(f"seeds must give one count per case ({len(cases)}), got {len(counts)}")
    simulated = [
        (p.with_records(max_records) if max_records is not None and p.n > max_records else p, m)
        for p, m in cases
    ]
    memo = cache if cache is not None else SimulationCache()
    runs = [(p, m, check_count("seeds", c)) for (p, m), c in zip(simulated, counts, strict=True)]
    if executor is None:
        with make_executor() as own:
            memo.fill(runs, prediction_seeds, own)
    else:
        memo.fill(runs, prediction_seeds, executor)
    found = []
    for (p, m), count in zip(simulated, counts, strict=True):
        errors = memo.lookup(p, m, count)
        assert errors is not None  # simulated above
        found.append(Prediction(m, p, errors, first_seed(p)))
    return found


def predict(
    problem: Problem,
    mechanism: str,
    *,
    seeds: int = DEFAULT_SEEDS,
    max_records: int | None = None,
    executor: Executor | None = None,
    cache: SimulationCache | None = None,
) -> Prediction:
    """The prediction for one problem and mechanism (``predict_many``)."""
    cases = [(problem, mechanism)]
    found = predict_many(
        cases, seeds=seeds, max_records=max_records, executor=executor, cache=cache
    )
    return found[0]


def outlooks(
    problem: Problem,
    mechanisms: Sequence[str],
    *,
    seeds: int = DEFAULT_SEEDS,
    sensitivity_seeds: int = SENSITIVITY_SEEDS,
    max_records: int | None = None,
    executor: Executor | None = None,
    cache: SimulationCache | None = None,
) -> list[Outlook]:
    """Each mechanism's prediction at the problem's SNR (``seeds`` simulations) and at
    ``SNR_FACTORS`` times it (``Problem.at_snr``; ``sensitivity_seeds`` each, at most
    ``seeds``; 0: none, ``Outlook.sensitivity`` empty, and the predictions at the
    problem's SNR the same numbers), as one batch (``cache`` as in ``predict_many``)."""
    if sensitivity_seeds < 0:
        raise ValueError(f"sensitivity_seeds must be >= 0, got {sensitivity_seeds!r}")
    factors = SNR_FACTORS if sensitivity_seeds > 0 else ()
    variants = [problem, *(problem.at_snr(f * problem.snr) for f in factors)]
    cases = [(v, m) for m in mechanisms for v in variants]
    side = min(seeds, sensitivity_seeds)
    counts = [seeds if v is problem else side for _ in mechanisms for v in variants]
    found = predict_many(
        cases, seeds=counts, max_records=max_records, executor=executor, cache=cache
    )
    width = len(variants)
    return [
        Outlook(found[i * width], tuple(found[i * width + 1 : (i + 1) * width]))
        for i in range(len(mechanisms))
    ]
