"""What accuracy a federated run can expect, from seeded in-process simulations.

One implementation behind ``ldpem plan``, the forecast a coordinator states when a run is
created (``ldpem.server.forecast``) and the warning of ``ldpem simulate --data``.

A ``Problem`` is the public description of a run: model, d, σ, budget, rounds and the
hospitals' record counts. Each estimate draws synthetic data of that model (‖β*‖ = snr·σ),
splits it over the hospitals with the given counts, and runs ``run_gradient_em`` with the
mechanism each agent would build — for ``hospital`` one per hospital, from its own count.
The study defaults (δ, τ, m, β⁰) are ``ldpem.common.protocol``'s, and each seed's run is
exactly ``ldpem simulate``'s with the same seed and hospital sizes (same generator, data,
start and split), so the forecast of ``run create`` is the mean of ``simulate``'s figures.
The trivial estimate β = 0 has error ‖β*‖ = snr·σ. A mechanism "beats β = 0" here when its
mean final error is at most half of that (``BEAT_FRACTION``): the runs start at a random β⁰
of norm σ, as the coordinator's do, whose error is already about ‖β*‖, so an error just
below ‖β*‖ only says the EM did not move. At half, the estimate points within ~30° of β*.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from ldpem.common._validation import check_count, check_positive
from ldpem.common.calibration import DEFAULT_ZETA
from ldpem.common.mechanisms import Mechanism, get_mechanism, mechanism_names
from ldpem.common.models import get_model
from ldpem.common.protocol import (
    CentralNoise,
    central_noise_for,
    holder_records_per_round,
    initial_beta,
    make_mechanism,
    records_per_round,
    study_beta_bound,
    study_delta,
    study_rng,
    study_t_min,
    study_tau,
)
from ldpem.common.simulation import run_gradient_em, split_holders

__all__ = [
    "BEAT_FRACTION",
    "Estimate",
    "Plan",
    "Problem",
    "crossover_records",
    "estimate",
    "final_errors",
    "make_plan",
    "recommendation",
    "study_errors",
]

#: Mechanisms ``ldpem plan`` compares (β = 0 is added as the trivial reference).
#: A mean final error at most this fraction of ‖β*‖ counts as beating β = 0.
BEAT_FRACTION = 0.5


@dataclass(frozen=True)
class Problem:
    """The public description of a run. ``delta`` None: n^-1.1; ``tau`` None: the default
    of the model's ``default_tau`` for the bound B = ``beta_bound`` (None: snr·σ), as
    ``protocol.study_delta`` and ``protocol.study_tau`` resolve them;
    ``missing`` None: 0.1 for rmc, else 0; ``scale`` overrides Algorithm 2's s."""

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

    def with_records(self, n: int) -> Problem:
        """The same problem with ``n`` records split in the same proportions."""
        total = self.n
        sizes = [max(self.rounds, round(s * n / total)) for s in self.sizes]
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


def _mechanisms(
    problem: Problem, name: str
) -> tuple[Mechanism, list[Mechanism] | None, CentralNoise | None]:
    """The study's mechanism, each hospital's own when holders take their own scale
    (``hospital``), and the central noise. Noise shares assume the default t_min
    (``protocol.study_t_min``) of the hospitals."""

    def build(m: int) -> Mechanism:
        return make_mechanism(
            name,
            d=problem.d,
            records_per_round=m,
            epsilon=problem.epsilon,
            delta=problem.resolved_delta,
            tau=problem.resolved_tau,
            zeta=problem.zeta,
            clip=problem.clip,
            accounting=problem.accounting,
            scale=problem.scale,
            t_min=study_t_min(None, len(problem.sizes)),
        )

    if get_mechanism(name).per_holder_scale:
        holders = [build(holder_records_per_round(s, problem.rounds)) for s in problem.sizes]
        return holders[0], holders, None
    mechanism = build(records_per_round(problem.sizes, problem.rounds))
    central = central_noise_for(
        mechanism,
        d=problem.d,
        epsilon=problem.epsilon,
        delta=problem.resolved_delta,
        accounting=problem.accounting,
    )
    return mechanism, None, central


def study_errors(problem: Problem, mechanism: str, seed: int) -> list[float]:
    """The errors after each round of the simulated study with ``seed``: synthetic data of
    the problem's model, β⁰, the split over the hospitals, then the run, all from
    ``protocol.study_rng(seed)`` in this order (the order of ``ldpem simulate``)."""
    model = get_model(problem.model)
    aggregate, holders_mechanisms, central = _mechanisms(problem, mechanism)
    missing = problem.missing
    if missing is None:
        missing = 0.1 if model.allows_missing else 0.0
    rng = study_rng(seed)
    records, beta_star = model.generate(
        problem.n, problem.d, snr=problem.snr, sigma=problem.sigma, missing=missing, rng=rng
    )
    beta0 = initial_beta(problem.d, problem.sigma, rng)
    holders = split_holders(records, problem.sizes, rng)
    result = run_gradient_em(
        model=model,
        holders=holders,
        sigma=problem.sigma,
        mechanism=aggregate,
        rounds=problem.rounds,
        beta0=beta0,
        rng=rng,
        eta=problem.eta,
        beta_star=beta_star,
        holder_mechanisms=holders_mechanisms,
        central=central,
    )
    return result.errors


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
        final = study_errors(problem, mechanism, seed)[-1]
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
    """One line: which mechanism that keeps the noise on the hospitals' machines to use."""
    by_name = {e.mechanism: e for e in estimates}
    trivial, useful = problem.trivial_error, problem.useful_error
    local, hospital = by_name.get("local"), by_name.get("hospital")
    need = (
        f"local DP needs about n ≥ {local_crossover:,} records to beat β = 0"
        if local_crossover is not None
        else f"local DP does not beat β = 0 even at n = {limit:,}"
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
