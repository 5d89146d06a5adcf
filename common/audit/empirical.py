"""Empirical privacy audit: a statistical lower bound on ε from distinguishing attacks.

For a mechanism that claims (ε, δ)-DP, any test that tells apart its outputs on two
neighbouring inputs with false-positive rate α and false-negative rate β must satisfy
1 − δ − β ≤ e^ε α (and symmetrically). Running the real code many times on a worst-case
pair, estimating α and β for a threshold test with one-sided Clopper–Pearson bounds, and
solving for ε gives an ε that holds with 95% confidence as a *lower* bound on the true ε.
If it exceeds the claim, the implementation leaks more than it says.

Procedure (Jagielski et al. 2020; Nasr et al. 2021), per audited pair:

1. The pair: the two inputs whose noiseless outputs are farthest apart in L2, found by
   an exact search over a pool of candidates: zero, ± a magnitude in every 1/8 decade
   from the smallest normal float (2.2e-308) to 1.7e308 (so every binade) plus seeded
   log-uniform draws between them, a dense grid around the maximiser of T; as rows with
   all coordinates equal, one spike, alternating signs and seeded random mixed signs and
   magnitudes; and for models responses of both signs and missing covariates.
2. The statistic: the projection of each output on the direction between the two
   noiseless outputs — the likelihood-ratio test for Gaussian noise.
3. Half the draws choose the threshold; the other half, fresh, give the rates, so the
   Clopper–Pearson intervals are valid (each one-sided at 97.5%: 95% jointly).

The declarations the noise is calibrated from are checked as well (``declaration_failure``):
the measured worst pair's distance must not exceed the declared ``sensitivity``, and no
contribution — NaN and ±inf gradients included — may exceed ``record_bound``. A mechanism
that understates either is under-noised by construction, which a distinguisher of
affordable power may not see (issue 30: a sensitivity short by √2 gave ε ≈ 1.47 at a
claimed 1, and passed a million-draw audit).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import numpy as np
from numpy.typing import NDArray

from ldpem.common.audit.pairs import farthest_pair, holder_candidates, mechanism_candidates
from ldpem.common.audit.stats import (
    NOISE_TOLERANCE,
    AuditOutcome,
    clopper_pearson_upper,
    epsilon_lower_bound,
    measure_noise_ratio,
    noise_is_sufficient,
    reference_noise_std,
)
from ldpem.common.core._validation import check_count, check_positive
from ldpem.common.mechanisms import Mechanism, noise_shares
from ldpem.common.models import Model, Records
from ldpem.common.protocol.rounds import holder_round

__all__ = [
    "DECLARATION_SLACK",
    "NOISE_TOLERANCE",
    "AuditOutcome",
    "audit_holder_round",
    "audit_mechanism",
    "clopper_pearson_upper",
    "declaration_failure",
    "epsilon_lower_bound",
    "measure_noise_ratio",
    "measured_record_bound",
    "noise_is_sufficient",
    "reference_noise_std",
    "run_distinguisher",
]

FloatArray = NDArray[np.float64]


def run_distinguisher(
    sample_first: Callable[[int], FloatArray],
    sample_second: Callable[[int], FloatArray],
    direction: FloatArray,
    draws: int,
    delta: float,
    reference_noise_std: float | None = None,
) -> AuditOutcome:
    """Draw ``draws`` outputs of each input, project them on ``direction`` (first minus
    second), and bound ε from the projections.

    Parameters
    ----------
    sample_first, sample_second : callable
        ``sample(n)`` gives n outputs of one input, an array of shape (n, d).
    direction : array of shape (d,)
        The test direction.
    draws : int
        Outputs of each input (≥ 4).
    delta : float
        The δ at which ε is bounded, in (0, 1).
    reference_noise_std : float, optional
        A σ_r to measure the noise along ``direction`` against (``measure_noise_ratio``); the
        outcome's ``noise_ratio`` is None without it, or when ``direction`` is 0.

    Returns
    -------
    AuditOutcome
    """
    draws = check_count("draws", draws, minimum=4)
    norm = float(np.linalg.norm(direction))
    measurable = norm > 0.0 and math.isfinite(norm)
    unit = direction / norm if measurable else direction * 0.0
    positives = sample_first(draws) @ unit
    negatives = sample_second(draws) @ unit
    outcome = epsilon_lower_bound(positives, negatives, delta)
    if reference_noise_std is None or not measurable:
        return outcome
    return replace(
        outcome, noise_ratio=measure_noise_ratio(positives, negatives, reference_noise_std)
    )


def audit_mechanism(
    mechanism: Mechanism,
    *,
    d: int,
    records_per_round: int,
    delta: float,
    draws: int,
    rng: np.random.Generator,
    reference_noise_std: float | None = None,
    aggregate_noise_std: float | None = None,
) -> tuple[AuditOutcome, float]:
    """Audit one record's release by ``mechanism`` on its worst-case pair of gradients.

    Local mechanisms: the release is that record's report, drawn with ``privatize``.
    Central mechanisms: the release is the curator's average over ``records_per_round``
    records (the others fixed at zero gradient) plus ``aggregate_noise``, or plus
    N(0, ``aggregate_noise_std``² I) when the noise is not the mechanism's own: in a
    federated run the agent's central mechanism carries none, and the coordinator adds
    ``protocol.central_noise(params)``.

    Parameters
    ----------
    mechanism : Mechanism
        The mechanism audited.
    d : int
        Dimension of the gradients.
    records_per_round : int
        m, the records a central mechanism averages.
    delta : float
        The δ at which ε is bounded, in (0, 1).
    draws : int
        Outputs of each of the pair.
    rng : numpy.random.Generator
        The noise stream.
    reference_noise_std : float, optional
        An independently computed σ_r of the release (of the average, for a central
        mechanism) that the measured noise is compared with (``AuditOutcome.noise_ratio``).
    aggregate_noise_std : float, optional
        σ_r of the aggregator's noise on the average of a central mechanism, when another
        party adds it (ValueError for a local mechanism).

    Returns
    -------
    outcome : AuditOutcome
    distance : float
        L2 distance between the pair's noiseless outputs (inf: a leak).
    """
    if aggregate_noise_std is not None:
        if mechanism.is_local:
            raise ValueError(
                f"aggregate_noise_std is for central mechanisms, got {aggregate_noise_std!r} "
                f"for the local mechanism {mechanism.name!r}"
            )
        if not (math.isfinite(aggregate_noise_std) and aggregate_noise_std >= 0.0):
            raise ValueError(
                f"aggregate_noise_std must be a finite number >= 0, got {aggregate_noise_std!r}"
            )
    candidates = mechanism_candidates(d)
    first, second, distance = farthest_pair(candidates, mechanism.contributions)
    if not math.isfinite(distance):
        return _leak(draws), distance
    g_first, g_second = candidates[first], candidates[second]
    direction = (
        mechanism.contributions(g_first[None, :])[0] - mechanism.contributions(g_second[None, :])[0]
    )

    if mechanism.is_local:

        def sampler(gradient: FloatArray) -> Callable[[int], FloatArray]:
            return lambda n: mechanism.privatize(np.broadcast_to(gradient, (n, d)), rng)

    else:

        def noise(n: int) -> FloatArray:
            if aggregate_noise_std is None:
                return mechanism.aggregate_noise(d, rng, draws=n)
            drawn: FloatArray = rng.normal(0.0, aggregate_noise_std, (n, d))
            return drawn

        def sampler(gradient: FloatArray) -> Callable[[int], FloatArray]:
            mean = mechanism.contributions(gradient[None, :])[0] / records_per_round
            return lambda n: mean + noise(n)

    outcome = run_distinguisher(
        sampler(g_first), sampler(g_second), direction, draws, delta, reference_noise_std
    )
    return outcome, distance


#: Relative slack of the declaration checks: floating-point rounding in the contributions
#: (a few ulps), never a factor a wrong formula would make.
DECLARATION_SLACK = 1e-9


def measured_record_bound(mechanism: Mechanism, d: int) -> float:
    """The largest |coordinate| of ``mechanism``'s contributions over the audit's candidate
    gradients (``mechanism_candidates``) and rows of NaN, +inf and −inf; inf when one is
    not finite."""
    special = np.array([[math.nan] * d, [math.inf] * d, [-math.inf] * d])
    candidates = np.concatenate([mechanism_candidates(d), special])
    with np.errstate(all="ignore"):
        contributions = np.abs(mechanism.contributions(candidates))
    if not np.all(np.isfinite(contributions)):
        return math.inf
    return float(contributions.max())


def declaration_failure(
    mechanism: Mechanism, *, d: int, distance: float | None = None
) -> str | None:
    """Why ``mechanism``'s declarations do not hold in dimension ``d``, in one line naming
    it, the declared and the measured value; None when they hold.

    ``distance``: the measured worst pair's L2 distance between contributions (what
    ``audit_mechanism`` and ``audit_holder_round`` return); None to measure it here, over
    ``mechanism_candidates(d)``. It must not exceed ``sensitivity(d)``, and
    ``measured_record_bound`` must not exceed ``record_bound(d)`` (each within
    ``DECLARATION_SLACK``)."""
    if distance is None:
        _, _, distance = farthest_pair(mechanism_candidates(d), mechanism.contributions)
    declared = mechanism.sensitivity(d)
    if not distance <= declared * (1.0 + DECLARATION_SLACK):
        return (
            f"mechanism {mechanism.name}: declared sensitivity {declared:.6g} at d = {d}, "
            f"but its worst pair's contributions are {distance:.6g} apart"
        )
    bound = mechanism.record_bound(d)
    if bound == math.inf:
        return None  # no bound declared (``none``): nothing the coordinator relies on
    measured = measured_record_bound(mechanism, d)
    if not measured <= bound * (1.0 + DECLARATION_SLACK):
        return (
            f"mechanism {mechanism.name}: declared record_bound {bound:.6g} at d = {d}, "
            f"but a contribution's coordinate reaches {measured:.6g}"
        )
    return None


def _leak(draws: int) -> AuditOutcome:
    """The outcome for a mechanism whose noiseless output is not finite: unbounded ε."""
    return AuditOutcome(
        lower_bound=math.inf,
        false_positive_rate=0.0,
        false_negative_rate=0.0,
        threshold=math.nan,
        draws=draws,
    )


#: Broadcasts β = v·(1, …, 1) the audit tries: the coordinator is untrusted and may send
#: any β, and a large β lets the records drive the gradients to both extremes.
BROADCAST_LEVELS = (0.5, 100.0, 1e4)


def _identity(rows: FloatArray) -> FloatArray:
    return rows


def audit_holder_round(
    model: Model,
    mechanism: Mechanism,
    *,
    d: int,
    sigma: float,
    delta: float,
    draws: int,
    rng: np.random.Generator,
    reference_noise_std: float | None = None,
) -> tuple[AuditOutcome, float]:
    """Audit what a data holder sends — the (sum, count) report of ``holder_round`` — for a
    holder whose one record is either of the worst-case pair of model records.

    One record per holder makes the report exactly that record's release, the tightest
    case; every output field (the sum and the count) enters the test: a count that
    differed between the pair would be a perfect distinguisher. When the mechanism's noise
    is shared (``noise_shares`` > 1, docs/SECAGG.md), the release is the sum of that
    holder's report and the reports of ``noise_shares`` − 1 holders without records,
    each from ``holder_round``: what a round releases with exactly t_min − c honest
    holders (the c colluders' reports add nothing the coordinator cannot subtract).
    Records whose gradients overflow to ±inf or NaN stay in the pool: the mechanism must
    give them a bounded report like any other (a refusal, or an unbounded report, is what
    the audit looks for).

    ``reference_noise_std``: an independently computed σ_r (e.g. ``reference_noise_std``
    from ε, δ and the mechanism's sensitivity) that the measured noise is compared with;
    without it the mechanism's own ``noise_std`` is used, which cannot catch a wrong
    calibration formula.

    Parameters
    ----------
    model : Model
        The model whose records are audited.
    mechanism : Mechanism
        The holder's mechanism.
    d : int
        The records' dimension; the reports have p = ``model.parameter_dim(d)``
        coordinates (K·(d + 1) for a mixture) and β is broadcast over p.
    sigma : float
        The model's noise std σ (> 0), not the privacy noise.
    delta : float
        The δ at which ε is bounded, in (0, 1).
    draws : int
        Reports of each of the pair.
    rng : numpy.random.Generator
        The noise stream.
    reference_noise_std : float, optional
        The σ_r the measured noise is compared with.

    Returns
    -------
    outcome : AuditOutcome
    distance : float
        L2 distance between the pair's noiseless contributions, at the broadcast β where
        it is largest (inf: a leak).
    """
    reference = mechanism.noise_std if reference_noise_std is None else reference_noise_std
    reference = check_positive("reference_noise_std", reference)
    pool = holder_candidates(model, d)
    size = model.parameter_dim(d)
    best: tuple[float, int, int, FloatArray] | None = None
    for level in BROADCAST_LEVELS:
        beta = np.full(size, level)
        with np.errstate(all="ignore"):  # hostile records overflow: that is the point
            gradients = model.gradients(beta, pool, sigma)
        contributions = mechanism.contributions(gradients)
        first, second, distance = farthest_pair(contributions, _identity)
        if not math.isfinite(distance):
            return _leak(draws), distance
        if best is None or distance > best[0]:
            best = (distance, first, second, beta)
    assert best is not None
    distance, first, second, beta = best
    with np.errstate(all="ignore"):
        gradients = model.gradients(beta, pool, sigma)
    contributions = mechanism.contributions(gradients)
    direction = np.append(contributions[first] - contributions[second], 0.0)

    nobody = pool.take(slice(0, 0))

    def report(records: Records) -> FloatArray:
        sent = holder_round(
            model=model, beta=beta, records=records, sigma=sigma, mechanism=mechanism, rng=rng
        )
        return np.append(sent.total, sent.count)

    def sampler(index: int) -> Callable[[int], FloatArray]:
        holder = pool.take(slice(index, index + 1))

        def draw(n: int) -> FloatArray:
            out = np.empty((n, size + 1))
            for k in range(n):
                # The others' reports are summed as the M-step sums them (math.fsum).
                rows = [report(holder)]
                rows += [report(nobody) for _ in range(noise_shares(mechanism) - 1)]
                out[k] = [math.fsum(column) for column in zip(*rows, strict=True)]
            return out

        return draw

    first_draws = sampler(first)(draws)
    second_draws = sampler(second)(draws)
    if not np.array_equal(np.unique(first_draws[:, size]), np.unique(second_draws[:, size])):
        return _leak(draws), math.inf
    unit = direction / np.linalg.norm(direction)
    positives, negatives = first_draws @ unit, second_draws @ unit
    outcome = epsilon_lower_bound(positives, negatives, delta)
    # The distinguisher has little power at small δ with few draws; the noise level itself
    # is measured precisely.
    return replace(
        outcome, noise_ratio=measure_noise_ratio(positives, negatives, reference)
    ), distance
