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
(a Beta share, standard deviation √(0.16/(S+2))): ± 9% with the planner's 20
(``DEFAULT_SEEDS``), ± 2.8% with the forecast's 200. The sensitivity to the SNR, the
crossover and schedule searches only compare means: they use ``SEARCH_SEEDS``, and the
what-ifs at other SNRs ``SENSITIVITY_SEEDS``.
The seeds run in batches on an ``ldpem.common.planning.executor`` (this machine's cores by
default); each seed's result depends on the seed alone, not on the executor.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

import numpy as np

from ldpem.common.core._validation import check_count, check_positive
from ldpem.common.core.calibration import DEFAULT_ZETA
from ldpem.common.models import get_model
from ldpem.common.planning.executor import Executor, make_executor
from ldpem.common.planning.fastsim import final_errors
from ldpem.common.planning.study import Study
from ldpem.common.protocol import (
    EQUAL,
    LAST,
    least_records,
    study_beta_bound,
    study_delta,
    study_tau,
)

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
#: Simulations behind a prediction's band unless asked otherwise (``ldpem plan``, whose
#: six mechanisms, sensitivity and searches must stay within seconds): its band covers 80%
#: of new runs on average, ± 9% (one standard deviation) from one problem to another. The
#: coordinator's forecast takes more (``server.forecast.FORECAST_SEEDS``).
DEFAULT_SEEDS = 20
#: Simulations behind a figure that is only compared (the SNR sensitivity, the crossover
#: and schedule searches): their means, not their bands.
SEARCH_SEEDS = 20
#: Simulations behind each mean at half and twice the assumed SNR (a what-if shown beside
#: the band, and the forecast's warning when half the SNR would do no better than β = 0).
SENSITIVITY_SEEDS = 10
#: The band's quantiles.
BAND = (0.1, 0.9)
#: A mean final error at most this fraction of ‖β*‖ counts as beating β = 0. Not ‖β*‖
#: itself: runs start at a random β⁰ of norm σ, as the coordinator's do, whose error is
#: already about ‖β*‖, so an error just below it only says the EM did not move. At half,
#: the estimate points within ~30° of β*.
BEAT_FRACTION = 0.5
#: The planner and the forecast also simulate ‖β*‖/σ at these multiples of the assumed
#: value: the SNR is an assumption, and the error depends on it.
SNR_FACTORS = (0.5, 2.0)


@dataclass(frozen=True)
class Problem:
    """The public description of a run. ``delta`` None: n^-1.1; ``tau`` None: the default
    of the model's ``default_tau`` for the bound B = ``beta_bound`` (None: snr·σ), as
    ``protocol.study_delta`` and ``protocol.study_tau`` resolve them;
    ``missing`` None: 0.1 for rmc, else 0; ``scale`` overrides Algorithm 2's s;
    ``schedule`` and ``final``: the run's round schedule and reported estimate."""

    model: str
    d: int
    sizes: tuple[int, ...]
    sigma: float = 1.0
    epsilon: float = 1.0
    delta: float | None = None
    rounds: int = 10
    snr: float = 3.0
    tau: float | None = None
    beta_bound: float | None = None
    zeta: float = DEFAULT_ZETA
    accounting: str = "exact"
    missing: float | None = None
    clip: float = 1.0
    eta: float = 1.0
    scale: float | None = None
    schedule: str | tuple[float, ...] = EQUAL
    final: str = LAST
    #: Noise shares (secagg): the fewest holders of a sum (None: ``protocol.study_t_min``)
    #: and c, the most of them that may collude (None: ``protocol.study_colluders``).
    t_min: int | None = None
    colluders: int | None = None
    #: Noise shares: the mesh or the SecAgg+ graph, with the graph's δ and h (``Study``).
    secagg_topology: str = "mesh"
    dropout_share: float | None = None
    min_honest_shares: int | None = None

    def __post_init__(self) -> None:
        get_model(self.model)
        check_count("d", self.d)
        check_count("rounds", self.rounds)
        check_positive("sigma", self.sigma)
        check_positive("epsilon", self.epsilon)
        check_positive("snr", self.snr)
        if not self.sizes:
            raise ValueError("sizes must list at least one hospital")
        for size in self.sizes:
            if size < self.rounds:
                raise ValueError(
                    f"every hospital needs at least rounds = {self.rounds} records, got {size}"
                )

    @property
    def n(self) -> int:
        return sum(self.sizes)

    @property
    def resolved_delta(self) -> float:
        return study_delta(self.delta, self.n)

    @property
    def resolved_bound(self) -> float:
        """The declared bound B on ‖β‖₂: ``beta_bound``, else snr·σ."""
        return study_beta_bound(self.beta_bound, snr=self.snr, sigma=self.sigma)

    @property
    def resolved_tau(self) -> float:
        return study_tau(
            self.model, tau=self.tau, beta_bound=self.resolved_bound, sigma=self.sigma, d=self.d
        )

    @property
    def trivial_error(self) -> float:
        """Error of the estimate β = 0: ‖β*‖ = snr·σ."""
        return self.snr * self.sigma

    @property
    def useful_error(self) -> float:
        """The mean error below which a mechanism beats β = 0 (``BEAT_FRACTION``·‖β*‖)."""
        return BEAT_FRACTION * self.trivial_error

    @property
    def seed_key(self) -> str:
        """What the prediction seeds are drawn from: every field but those a schedule
        search varies (rounds, schedule, final), as text."""
        skip = {"rounds", "schedule", "final"}
        return repr([(f.name, getattr(self, f.name)) for f in fields(self) if f.name not in skip])

    def study(self, mechanism: str, seed: int) -> Study:
        """The simulated study of this problem with ``mechanism`` and ``seed``: synthetic
        data of the model with ‖β*‖ = snr·σ, dealt to hospitals of ``sizes`` records.
        Every field of a problem is one of a study's."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return Study(mechanism=mechanism, n=self.n, seed=seed, **values)

    def with_records(self, n: int) -> Problem:
        """The same problem with ``n`` records split in the same proportions."""
        total = self.n
        least = least_records(self.rounds, self.schedule)
        sizes = [max(least, round(s * n / total)) for s in self.sizes]
        return replace(self, sizes=tuple(sizes))

    def at_snr(self, snr: float) -> Problem:
        """The same run if ‖β*‖/σ were ``snr``: the data change, the run's public
        parameters do not (its bound B, hence τ and the scale, stay those of the assumed
        SNR, as a run created under that assumption publishes them)."""
        return replace(self, snr=snr, beta_bound=self.resolved_bound)


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


def _final_errors(task: tuple[Problem, str, tuple[int, ...]]) -> list[float]:
    """A batch of simulations: the errors of the reported estimate (β^T, or the average
    the problem's ``final`` asks) of ``problem``'s study with ``mechanism`` at each seed
    (+inf when it diverged). Module level: a process pool runs it."""
    problem, mechanism, seeds = task
    errors = final_errors(problem.study(mechanism, seeds[0]), seeds)
    return [float(e) if math.isfinite(e) else math.inf for e in errors]


#: Seeds in one task of the executor: fewer, larger tasks cost less to send.
_BATCH = 10


def predict_many(
    cases: Sequence[tuple[Problem, str]],
    *,
    seeds: int | Sequence[int] = DEFAULT_SEEDS,
    max_records: int | None = None,
    executor: Executor | None = None,
) -> list[Prediction]:
    """A prediction for each (problem, mechanism) of ``cases``, all their simulations
    mapped as one batch of tasks (so that every worker stays busy across cases).

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
    tasks = []
    for (p, m), count in zip(simulated, counts, strict=True):
        chosen = list(prediction_seeds(p, count))
        tasks += [(p, m, tuple(chosen[i : i + _BATCH])) for i in range(0, count, _BATCH)]
    if executor is None:
        with make_executor() as own:
            batches = own.map(_final_errors, tasks)
    else:
        batches = executor.map(_final_errors, tasks)
    errors = [e for batch in batches for e in batch]
    found = []
    start = 0
    for (p, m), count in zip(simulated, counts, strict=True):
        found.append(Prediction(m, p, tuple(errors[start : start + count]), first_seed(p)))
        start += count
    return found


def predict(
    problem: Problem,
    mechanism: str,
    *,
    seeds: int = DEFAULT_SEEDS,
    max_records: int | None = None,
    executor: Executor | None = None,
) -> Prediction:
    """The prediction for one problem and mechanism (``predict_many``)."""
    cases = [(problem, mechanism)]
    return predict_many(cases, seeds=seeds, max_records=max_records, executor=executor)[0]


def outlooks(
    problem: Problem,
    mechanisms: Sequence[str],
    *,
    seeds: int = DEFAULT_SEEDS,
    sensitivity_seeds: int = SENSITIVITY_SEEDS,
    max_records: int | None = None,
    executor: Executor | None = None,
) -> list[Outlook]:
    """Each mechanism's prediction at the problem's SNR (``seeds`` simulations) and at
    ``SNR_FACTORS`` times it (``Problem.at_snr``; ``sensitivity_seeds`` each, at most
    ``seeds``), as one batch."""
    variants = [problem, *(problem.at_snr(f * problem.snr) for f in SNR_FACTORS)]
    cases = [(v, m) for m in mechanisms for v in variants]
    side = min(seeds, sensitivity_seeds)
    counts = [seeds if v is problem else side for _ in mechanisms for v in variants]
    found = predict_many(cases, seeds=counts, max_records=max_records, executor=executor)
    width = len(variants)
    return [
        Outlook(found[i * width], tuple(found[i * width + 1 : (i + 1) * width]))
        for i in range(len(mechanisms))
    ]
