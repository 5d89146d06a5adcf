"""In-process gradient EM over simulated data holders (Algorithm 2 and its baselines).

Each round, every holder runs ``holder_round`` — the same function the hospital agent runs —
on its records for that round; the aggregator takes ``protocol.m_step`` — the same function
the coordinator runs: β^{t+1} = β^t + η·(Σ totals / Σ counts + central noise), the central
noise calibrated on the round's count. ``simulate_run`` is a federated run of given public
parameters, agents' seeds and records, simulated in-process: it reproduces the run's
trajectory bit for bit (docs/ARCHITECTURE.md, "One round protocol").

Records are either partitioned across rounds (Algorithm 2: each record reports once), by
the run's round schedule (``protocol.round_sizes``), or reused every round (``reuse=True``:
each record reports T times, its budget split). The mechanisms may differ by round (a
schedule's per-round scale, ``RoundMechanisms``); the reported estimate is
``protocol.final_estimate`` of the trajectory, as the coordinator's.

Dropouts (``dropout`` = P): each holder misses each round with probability P, and the
round is the sum of the others' reports. A round with fewer reports than the mechanism's
``honest_holders`` (t_min for noise shares: their shares would not make the noise) is
not released: β stays where it was, as a coordinator that cannot unmask the sum would
leave it (its noise variance is then the previous round's: the iterate is unchanged).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from ldpem.common.core._validation import check_count, check_positive
from ldpem.common.core.accounting import Budget
from ldpem.common.mechanisms import Mechanism, honest_holders
from ldpem.common.models import Model, Records
from ldpem.common.protocol import (
    EQUAL,
    LAST,
    CentralNoise,
    FinalEstimate,
    Schedule,
    SharedStream,
    Streams,
    central_noise,
    configured_model,
    final_estimate,
    holder_mechanism,
    is_equal,
    m_step,
    public_budget,
    report_noise_std,
    round_noise_variance,
    round_sizes,
    start_finish,
    start_round,
)
from ldpem.common.protocol.rounds import holder_round
from ldpem.common.wire import PublicParameters

__all__ = [
    "EMResult",
    "RoundMechanisms",
    "every_round",
    "random_holder_sizes",
    "round_groups",
    "run_gradient_em",
    "simulate_run",
    "split_holders",
]

FloatArray = NDArray[np.float64]


@dataclass
class EMResult:
    """Trajectory of a gradient EM run: betas (T+1, d) from β⁰ to β^T; errors after each
    round (T,) when β* is known; the variance of each round's privacy noise (T,,
    ``protocol.round_noise_variance``); the reported estimate (``final``)."""

    betas: list[FloatArray] = field(default_factory=list)
    errors: list[float] = field(default_factory=list)
    variances: list[float] = field(default_factory=list)
    final: FinalEstimate | None = None
    #: Holders whose report entered each round's sum (T,).
    reporters: list[int] = field(default_factory=list)
    #: Rounds (0-based) that were not released: fewer reports than ``honest_holders``.
    skipped: list[int] = field(default_factory=list)

    @property
    def beta(self) -> FloatArray:
        """The reported estimate, shape (d,): ``final``'s, else the last iterate β^T."""
        return self.betas[-1] if self.final is None else self.final.beta


@dataclass(frozen=True)
class RoundMechanisms:
    """The mechanisms of one round: each holder's (K,) and the aggregator's noise (None
    unless the mechanism's noise is the aggregator's)."""

    holders: tuple[Mechanism, ...]
    central: CentralNoise | None = None


def round_groups(
    records: Records,
    rounds: int,
    *,
    reuse: bool,
    rng: np.random.Generator,
    schedule: Schedule = EQUAL,
) -> list[Records]:
    """The records a holder uses in each round: T disjoint random groups of the schedule's
    sizes, or all T times.

    Parameters
    ----------
    records : Records
        The holder's n records (``x`` of shape (n, d)); n ≥ T unless ``reuse``.
    rounds : int
        T (≥ 1).
    reuse : bool
        Every record in every round.
    rng : numpy.random.Generator
        The holder's partition stream (one permutation, whatever the schedule).
    schedule : str or sequence of float
        The run's schedule (``protocol.round_sizes``); default equal rounds.

    Returns
    -------
    list of T Records
        Group t holds ``round_sizes(n, T, schedule)[t]`` records (equal: ⌊n/T⌋ or ⌈n/T⌉,
        the ``numpy.array_split`` sizes) in their original order (all n with ``reuse``).
    """
    rounds = check_count("rounds", rounds)
    if reuse:
        return [records] * rounds
    if records.n < rounds:
        raise ValueError(f"a holder with {records.n} records cannot be split over {rounds} rounds")
    bounds = np.cumsum(round_sizes(records.n, rounds, schedule))[:-1]
    order = rng.permutation(records.n)
    return [records.take(np.sort(part)) for part in np.split(order, bounds)]


def split_holders(
    records: Records, sizes: Sequence[int], rng: np.random.Generator | None = None
) -> list[Records]:
    """``records`` dealt to holders of ``sizes`` records (summing to records.n): by one random
    permutation from ``rng``, each holder keeping its records in their original order; or,
    without ``rng``, in consecutive parts (records already dealt out in that order, as the
    files of a federated run).

    Parameters
    ----------
    records : Records
        n records (``x`` of shape (n, d)).
    sizes : sequence of K int
        Records per holder, summing to n.
    rng : numpy.random.Generator, optional
        Draws the permutation.

    Returns
    -------
    list of K Records
        Holder k's records, ``x`` of shape (sizes[k], d).
    """
    if sum(sizes) != records.n:
        raise ValueError(f"sizes must sum to the {records.n} records, got {sum(sizes)}")
    bounds = np.cumsum([0, *sizes])
    if rng is None:
        return [records.take(slice(a, b)) for a, b in itertools.pairwise(bounds)]
    order = rng.permutation(records.n)
    return [records.take(np.sort(order[a:b])) for a, b in itertools.pairwise(bounds)]


def random_holder_sizes(n: int, holders: int, minimum: int, rng: np.random.Generator) -> list[int]:
    """K = ``holders`` unequal sizes summing to n, each ≥ ``minimum``: every holder gets
    ``minimum`` records and the rest is shared out multinomially with Dirichlet(1, …, 1)
    proportions (one Dirichlet and one multinomial draw from ``rng``).

    Returns
    -------
    list of K int
        Records per holder.
    """
    spare = n - holders * minimum
    if spare < 0:
        raise ValueError(f"n must be at least {holders * minimum}, got {n}")
    shares = rng.multinomial(spare, rng.dirichlet(np.ones(holders)))
    return [minimum + int(share) for share in shares]


def every_round(
    holders: Sequence[Mechanism], rounds: int, central: CentralNoise | None = None
) -> tuple[RoundMechanisms, ...]:
    """The same mechanisms, each holder's (K) and the aggregator's noise, in each of
    ``rounds`` rounds: what ``run_gradient_em`` takes for equal rounds."""
    return (RoundMechanisms(tuple(holders), central),) * check_count("rounds", rounds)


def run_gradient_em(
    *,
    model: Model,
    holders: Sequence[Records],
    sigma: float,
    mechanisms: Sequence[RoundMechanisms],
    beta0: FloatArray,
    rng: np.random.Generator | None = None,
    eta: float = 1.0,
    reuse: bool = False,
    beta_star: FloatArray | None = None,
    on_round: Callable[[int, FloatArray], None] | None = None,
    streams: Streams | None = None,
    schedule: Schedule = EQUAL,
    final: str = LAST,
    dropout: float = 0.0,
    dropout_rng: np.random.Generator | None = None,
) -> EMResult:
    """Run T rounds of (private) gradient EM over the ``holders``' records.

    Parameters
    ----------
    model : Model
        Gives the per-record gradients and the error.
    holders : sequence of K Records
        Holder k's records, ``x`` of shape (n_k, d).
    sigma : float
        The model's noise std σ (> 0), not the privacy noise.
    mechanisms : sequence of T RoundMechanisms
        Each round's mechanisms: each holder's (K) and the aggregator's noise (required
        when the mechanism's noise is the aggregator's, ``protocol.central_noise_for``);
        ``every_round`` when they do not change. Its length is T, the number of rounds.
    beta0 : array of shape (d,)
        The starting point β⁰.
    rng : numpy.random.Generator, optional
        Every random draw, when ``streams`` is not given.
    eta : float
        η > 0, the step size.
    reuse : bool
        Every record in every round (default: each in one round).
    beta_star : array of shape (d,), optional
        The true parameter; when given, ``errors`` are recorded.
    on_round : callable, optional
        ``on_round(t, beta)``, β of shape (d,), called after each M-step (t = 1..T).
    streams : Streams, optional
        Where the random draws come from (``protocol.FederatedStreams`` to model a
        federated run).
    schedule : str or sequence of float
        Records per round (``protocol.round_sizes``); default equal rounds.
    final : str
        The reported estimate (``protocol.final_estimate``): ``"last"`` or ``"average:k"``.
    dropout : float
        P in [0, 1): each holder misses each round with probability P (module doc).
    dropout_rng : numpy.random.Generator, optional
        Draws who drops out (one uniform per holder and round); required when P > 0.

    Returns
    -------
    EMResult
        ``betas``: T + 1 arrays of shape (d,), β⁰ … β^T; ``errors``: T floats when
        ``beta_star`` is given; ``variances``: T floats; ``final``: the estimate.
    """
    rounds = check_count("rounds", len(mechanisms))
    eta = check_positive("eta", eta)
    _check_run(mechanisms, holders=len(holders), dropout=dropout, dropout_rng=dropout_rng)
    if streams is None:
        if rng is None:
            raise ValueError("give rng or streams")
        streams = SharedStream(rng)
    groups = [
        round_groups(records, rounds, reuse=reuse, rng=streams.partition(k), schedule=schedule)
        for k, records in enumerate(holders)
    ]
    beta = np.array(beta0, dtype=np.float64)
    result = EMResult(betas=[beta.copy()])
    needed = max(honest_holders(m) for plan in mechanisms for m in plan.holders)
    for t, plan in enumerate(mechanisms):
        totals = []
        counts = []
        declared = []
        present = np.ones(len(holders), dtype=bool)
        if dropout > 0.0 and dropout_rng is not None:
            present = dropout_rng.random(len(holders)) >= dropout
        for k, holder_groups in enumerate(groups):
            if not present[k]:
                continue
            report = holder_round(
                model=model,
                beta=beta,
                records=holder_groups[t],
                sigma=sigma,
                mechanism=plan.holders[k],
                rng=streams.noise(k, t),
                in_start_round=start_round(model, t),
            )
            totals.append(report.total)
            counts.append(report.count)
            declared.append(report_noise_std(plan.holders[k]))
        result.reporters.append(len(totals))
        if len(totals) >= needed:
            central_rng = streams.central(t)
            finish = start_finish(model, sigma, t)
            step = m_step(
                beta,
                totals,
                counts,
                eta=eta,
                central=plan.central,
                rng=central_rng,
                start_from=finish,
            )
            beta = step.beta
            result.variances.append(
                round_noise_variance(plan.holders[0], counts, declared, plan.central)
            )
        else:
            result.skipped.append(t)
            result.variances.append(result.variances[-1] if result.variances else 0.0)
        result.betas.append(beta.copy())
        if beta_star is not None:
            result.errors.append(model.error(beta, beta_star))
        if on_round is not None:
            on_round(t + 1, beta)
    result.final = final_estimate(
        result.betas, result.variances, final=final, sign_invariant=model.sign_invariant
    )
    return result


def _check_run(
    mechanisms: Sequence[RoundMechanisms],
    *,
    holders: int,
    dropout: float,
    dropout_rng: np.random.Generator | None,
) -> None:
    """ValueError, naming the value, unless ``run_gradient_em`` can run: at least one
    holder, one mechanism per holder in every round, the aggregator's noise where it adds
    it, and a dropout P in [0, 1) with its generator."""
    if not holders:
        raise ValueError("at least one data holder is needed")
    for plan in mechanisms:
        if len(plan.holders) != holders:
            raise ValueError(
                f"mechanisms must give each round one mechanism per holder ({holders}), "
                f"got {len(plan.holders)}"
            )
        if not plan.holders[0].is_local and plan.central is None:
            raise ValueError(
                f"mechanism {plan.holders[0].name} is central: give its noise as the "
                "round's central (protocol.central_noise_for)"
            )
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
    if dropout > 0.0 and dropout_rng is None:
        raise ValueError("dropout needs a dropout_rng")


def simulate_run(
    params: PublicParameters,
    *,
    holders: Sequence[Records],
    beta0: Sequence[float],
    streams: Streams,
    budgets: Sequence[Budget] | None = None,
    beta_star: FloatArray | None = None,
) -> EMResult:
    """The federated run of ``params``, in-process: holder k has the records ``holders[k]``
    (enrolled with that count) and runs ``protocol.holder_mechanism`` of each round at its
    ``budgets[k]`` (default: the run's own, ``protocol.public_budget``); the aggregator
    adds the run's central noise of each round, and the estimate is the run's ``final``.
    With ``protocol.FederatedStreams`` of the agents' research seeds and the run's seed,
    this is the run's exact trajectory β⁰ … β^T and reported estimate.

    Parameters
    ----------
    params : PublicParameters
        The run's public parameters (model, d, σ, T, η, mechanism, budget, schedule, …).
    holders : sequence of K Records
        Holder k's records, ``x`` of shape (n_k, d).
    beta0 : sequence of d float
        β⁰ of the run.
    streams : Streams
        Where the random draws come from.
    budgets : sequence of K Budget, optional
        Each holder's own budget.
    beta_star : array of shape (d,), optional
        The true parameter; when given, ``errors`` are recorded.

    Returns
    -------
    EMResult
        ``betas``: T + 1 arrays of shape (d,); ``errors``: T floats when ``beta_star``
        is given; ``final``: the reported estimate.
    """
    budgets = list(budgets) if budgets is not None else [public_budget(params)] * len(holders)

    def round_plan(t: int | None) -> RoundMechanisms:
        mechanisms = tuple(
            holder_mechanism(params, records=h.n, budget=budget, t=t)
            for h, budget in zip(holders, budgets, strict=True)
        )
        return RoundMechanisms(mechanisms, central_noise(params, t))

    # Equal rounds share one plan; a schedule's rounds each have their own scale.
    if is_equal(params.schedule):
        plans = [round_plan(None)] * params.rounds
    else:
        plans = [round_plan(t) for t in range(params.rounds)]
    return run_gradient_em(
        model=configured_model(params),
        holders=holders,
        sigma=params.sigma,
        mechanisms=plans,
        beta0=np.asarray(beta0, dtype=np.float64),
        eta=params.eta,
        beta_star=beta_star,
        streams=streams,
        schedule=params.schedule,
        final=params.final,
    )
