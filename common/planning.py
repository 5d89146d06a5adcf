"""What accuracy a federated run can expect, from seeded in-process simulations.

One implementation behind ``ldpem plan``, the forecast a coordinator states when a run is
created (``ldpem.server.forecast``) and the warning of ``ldpem simulate --data``.

A ``Problem`` is the public description of a run: model, d, σ, budget, rounds and the
hospitals' record counts. Each estimate is a simulated study (``ldpem.common.study``,
``Problem.study``): synthetic data of that model (‖β*‖ = snr·σ), split over the hospitals
with the given counts, run with the mechanism each agent would build — for ``hospital``
one per hospital, from its own count. It is the study of ``ldpem simulate`` with the same
seed and hospital sizes, so the forecast of ``run create`` is the mean of its figures.
The trivial estimate β = 0 has error ‖β*‖ = snr·σ. A mechanism "beats β = 0" here when its
mean final error is at most half of that (``BEAT_FRACTION``): the runs start at a random β⁰
of norm σ, as the coordinator's do, whose error is already about ‖β*‖, so an error just
below ‖β*‖ only says the EM did not move. At half, the estimate points within ~30° of β*.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

import numpy as np

from ldpem.common._validation import check_count, check_positive
from ldpem.common.calibration import DEFAULT_ZETA
from ldpem.common.mechanisms import mechanism_names
from ldpem.common.models import get_model
from ldpem.common.protocol import (
    EQUAL,
    LAST,
    least_records,
    study_beta_bound,
    study_delta,
    study_tau,
)
from ldpem.common.study import Study, StudyResult, run_study

__all__ = [
    "BEAT_FRACTION",
    "WARNING_SEEDS",
    "Estimate",
    "Plan",
    "Problem",
    "beta_zero_warning",
    "crossover_records",
    "estimate",
    "final_errors",
    "make_plan",
    "recommendation",
    "study_errors",
]

#: A mean final error at most this fraction of ‖β*‖ counts as beating β = 0.
BEAT_FRACTION = 0.5
#: Simulations behind the warning of a study on records without a known β*.
WARNING_SEEDS = 2


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
    def resolved_tau(self) -> float:
        bound = study_beta_bound(self.beta_bound, snr=self.snr, sigma=self.sigma)
        return study_tau(self.model, tau=self.tau, beta_bound=bound, sigma=self.sigma, d=self.d)

    @property
    def trivial_error(self) -> float:
        """Error of the estimate β = 0: ‖β*‖ = snr·σ."""
        return self.snr * self.sigma

    @property
    def useful_error(self) -> float:
        """The mean error below which a mechanism beats β = 0 (``BEAT_FRACTION``·‖β*‖)."""
        return BEAT_FRACTION * self.trivial_error

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


@dataclass(frozen=True)
class Estimate:
    """Final errors of one mechanism over seeds: mean and the 10–90% band."""

    mechanism: str
    errors: tuple[float, ...]

    @property
    def mean(self) -> float:
        return float(np.mean(self.errors))

    @property
    def low(self) -> float:
        return float(np.quantile(self.errors, 0.1))

    @property
    def high(self) -> float:
        return float(np.quantile(self.errors, 0.9))


def study_errors(problem: Problem, mechanism: str, seed: int) -> tuple[float, ...]:
    """The errors after each round of the problem's study with ``mechanism`` and ``seed``
    (``Problem.study``): that of ``ldpem simulate`` with the same seed and sizes."""
    errors = run_study(problem.study(mechanism, seed)).errors
    assert errors is not None  # synthetic data: β* is known
    return errors


def final_errors(
    problem: Problem, mechanism: str, seeds: int, *, max_records: int | None = None
) -> list[float]:
    """Final estimation error of the simulated study for seeds 0..seeds−1 (inf when the
    run diverges).

    ``max_records``: above it, the hospitals' sizes are scaled down in proportion (which
    only makes the estimate pessimistic) and the mechanisms calibrated for the smaller run.
    """
    seeds = check_count("seeds", seeds)
    if max_records is not None and problem.n > max_records:
        problem = problem.with_records(max_records)
    errors = []
    for seed in range(seeds):
        # The error of the reported estimate: β^T, or the average the problem's final asks.
        final = run_study(problem.study(mechanism, seed)).final_error
        assert final is not None  # synthetic data: β* is known
        errors.append(final if math.isfinite(final) else math.inf)
    return errors


def estimate(problem: Problem, mechanism: str, seeds: int) -> Estimate:
    return Estimate(mechanism, tuple(final_errors(problem, mechanism, seeds)))


def crossover_records(
    problem: Problem,
    mechanism: str = "local",
    *,
    seeds: int = 2,
    max_records: int = 4_000_000,
    steps: int = 3,
) -> int | None:
    """The smallest n (coarse: within a factor 2^(1/2^steps)) at which ``mechanism``'s mean
    error beats β = 0 for this problem, its hospitals scaled in proportion and δ = n^-1.1
    when δ is not fixed; None if not even at ``max_records``.

    Doubling from the smallest n the hospitals and rounds allow, then ``steps`` bisections
    in log n.
    """
    useful = problem.useful_error

    def beats(n: int) -> bool:
        return float(np.mean(final_errors(problem.with_records(n), mechanism, seeds))) <= useful

    low = 0
    n = max(problem.rounds * len(problem.sizes), 250)
    while not beats(n):
        if n >= max_records:
            return None
        low, n = n, min(2 * n, max_records)
    if low == 0:
        return n
    high = n
    for _ in range(steps):
        middle = round(math.sqrt(low * high))
        if beats(middle):
            high = middle
        else:
            low = middle
    return high


@dataclass(frozen=True)
class Plan:
    problem: Problem
    estimates: tuple[Estimate, ...]
    #: Smallest n at which local beats β = 0 (None: not below the search's limit).
    local_crossover: int | None
    crossover_limit: int
    recommendation: str

    def as_dict(self) -> dict[str, object]:
        p = self.problem
        return {
            "model": p.model,
            "d": p.d,
            "sigma": p.sigma,
            "epsilon": p.epsilon,
            "delta": p.resolved_delta,
            "rounds": p.rounds,
            "snr": p.snr,
            "tau": p.resolved_tau,
            "hospital_sizes": list(p.sizes),
            "n": p.n,
            "seeds": len(self.estimates[0].errors) if self.estimates else 0,
            "mechanisms": {
                e.mechanism: {"mean": e.mean, "p10": e.low, "p90": e.high, "errors": e.errors}
                for e in self.estimates
            },
            "trivial_error": p.trivial_error,
            "beat_threshold": p.useful_error,
            "beats_trivial": {e.mechanism: e.mean <= p.useful_error for e in self.estimates},
            "local_crossover_n": self.local_crossover,
            "crossover_limit": self.crossover_limit,
            "recommendation": self.recommendation,
        }


def recommendation(
    problem: Problem, estimates: Sequence[Estimate], local_crossover: int | None, limit: int
) -> str:
    """One line: which mechanism that keeps the noise on the hospitals' machines to use:
    local, hospital, or secagg (noise shares, for a clear gain: it assumes an honest
    majority of holders)."""
    by_name = {e.mechanism: e for e in estimates}
    trivial, useful = problem.trivial_error, problem.useful_error
    local, hospital = by_name.get("local"), by_name.get("hospital")
    need = (
        f"local DP needs about n ≥ {local_crossover:,} records to beat β = 0"
        if local_crossover is not None
        else f"local DP does not beat β = 0 even at n = {limit:,}"
    )
    secagg = by_name.get("secagg")
    rivals = [e for e in (local, hospital) if e is not None and e.mean <= useful]
    if (
        secagg is not None
        and secagg.mean <= useful
        and all(secagg.mean < 0.8 * e.mean for e in rivals)
    ):
        # Noise shares add a trust assumption: only for a clear gain over both others.
        others = ", ".join(f"{e.mean:.3g} for {e.mechanism}" for e in (local, hospital) if e)
        return (
            f"use secure aggregation (--mechanism secagg, t_min > K/2): expected error "
            f"{secagg.mean:.3g} against {others} and {trivial:.3g} for β = 0, if at least "
            f"t_min of the holders do not collude with the coordinator; {need}"
        )
    if local is not None and hospital is not None:
        if hospital.mean <= useful and (local.mean > useful or hospital.mean < 0.8 * local.mean):
            return (
                f"use hospital-level DP (--mechanism hospital): expected error "
                f"{hospital.mean:.3g} against {local.mean:.3g} for local DP and {trivial:.3g} "
                f"for β = 0, with the same trust boundary; {need}"
            )
        if local.mean <= useful:
            return (
                f"use local DP (--mechanism local): expected error {local.mean:.3g} against "
                f"{trivial:.3g} for β = 0"
            )
    return (
        f"no private mechanism reaches error {useful:.3g} (half of β = 0's {trivial:.3g}) at "
        f"ε = {problem.epsilon:g} "
        f"with {problem.n:,} records: more records, a larger ε or fewer rounds; {need}"
    )


def make_plan(
    problem: Problem,
    *,
    mechanisms: Sequence[str] | None = None,
    seeds: int = 3,
    crossover_seeds: int = 2,
    crossover_limit: int = 4_000_000,
) -> Plan:
    """Estimates for ``mechanisms`` (default: every mechanism a federated run may use,
    from the registry), the local crossover n and the recommendation."""
    if mechanisms is None:
        mechanisms = mechanism_names(federated=True)
    estimates = tuple(estimate(problem, name, seeds) for name in mechanisms)
    crossover = crossover_records(
        problem, "local", seeds=crossover_seeds, max_records=crossover_limit
    )
    line = recommendation(problem, estimates, crossover, crossover_limit)
    return Plan(problem, estimates, crossover, crossover_limit, line)


def beta_zero_warning(result: StudyResult, *, max_records: int = 200_000) -> str | None:
    """For a study on records without a known β*: what the planning simulations expect for
    its size, budget and declared bound ‖β‖ ≤ B, and a warning when its mechanism cannot
    beat β = 0 there (``ldpem plan``). None when it can, or when β* is known (the error
    itself then says it)."""
    if result.beta_star is not None:
        return None
    study = result.study
    # The study's own values, with what its records resolved: their d and dealing, δ, τ
    # and the bound B as ‖β*‖; and the model's default share of missing covariates.
    values = {f.name: getattr(study, f.name) for f in fields(Problem)}
    resolved = {
        "d": result.d,
        "sizes": result.hospital_sizes,
        "delta": result.delta,
        "tau": result.tau,
        "snr": result.beta_bound / study.sigma,
        "missing": None,
    }
    problem = Problem(**{**values, **resolved})
    errors = final_errors(problem, study.mechanism, WARNING_SEEDS, max_records=max_records)
    expected = float(np.mean(errors))
    if expected <= problem.useful_error:
        return None
    return (
        f"on synthetic {study.model} data of this size with ‖β*‖ = {result.beta_bound:g}, "
        f"mechanism {study.mechanism} reaches a mean error of {expected:.3g}, not below half "
        f"the error of the trivial estimate β = 0 ({problem.trivial_error:.3g}): this "
        "estimate is probably no better than β = 0; see `ldpem plan` for what would be"
    )
