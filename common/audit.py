"""Empirical privacy audit: a statistical lower bound on ε from distinguishing attacks.

For a mechanism that claims (ε, δ)-DP, any test that tells apart its outputs on two
neighbouring inputs with false-positive rate α and false-negative rate β must satisfy
1 − δ − β ≤ e^ε α (and symmetrically). Running the real code many times on a worst-case
pair, estimating α and β for a threshold test with one-sided Clopper–Pearson bounds, and
solving for ε gives an ε that holds with 95% confidence as a *lower* bound on the true ε.
If it exceeds the claim, the implementation leaks more than it says.

Procedure (Jagielski et al. 2020; Nasr et al. 2021), per audited pair:

1. The pair: the two inputs whose noiseless outputs are farthest apart in L2, found by
   searching a pool of candidates (zeros, magnitudes from 1e-3 to 1e300, the maximiser
   of T, single-coordinate spikes, and for models missing covariates).
2. The statistic: the projection of each output on the direction between the two
   noiseless outputs — the likelihood-ratio test for Gaussian noise.
3. Half the draws choose the threshold; the other half, fresh, give the rates, so the
   Clopper–Pearson intervals are valid (each one-sided at 97.5%: 95% jointly).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray
from scipy.stats import beta as beta_distribution
from scipy.stats import chi2

from ldpem.common._validation import check_count, check_open_unit
from ldpem.common.mechanisms import Mechanism
from ldpem.common.models import Model, Records
from ldpem.common.rounds import holder_round

__all__ = [
    "AuditOutcome",
    "audit_holder_round",
    "audit_mechanism",
    "candidate_values",
    "clopper_pearson_upper",
    "epsilon_lower_bound",
    "farthest_pair",
    "run_distinguisher",
]

FloatArray = NDArray[np.float64]
#: Confidence of each one-sided Clopper–Pearson bound; two of them make 95% jointly.
ONE_SIDED_CONFIDENCE = 0.975


@dataclass(frozen=True)
class AuditOutcome:
    """Result of one distinguishing experiment."""

    lower_bound: float
    false_positive_rate: float
    false_negative_rate: float
    threshold: float
    draws: int
    #: 95% interval for (measured noise std)/(calibrated σ) along the test direction, where
    #: measured (holder_round path); an upper end below 1 means less noise than claimed.
    noise_ratio: tuple[float, float] | None = None


def clopper_pearson_upper(
    failures: int, trials: int, confidence: float = ONE_SIDED_CONFIDENCE
) -> float:
    """One-sided upper confidence bound for a binomial proportion (exact, Clopper–Pearson)."""
    trials = check_count("trials", trials)
    if not 0 <= failures <= trials:
        raise ValueError(f"failures must be in [0, {trials}], got {failures}")
    if failures == trials:
        return 1.0
    return float(beta_distribution.ppf(confidence, failures + 1, trials - failures))


def _epsilon_from_rates(fpr: float, fnr: float, delta: float) -> float:
    """Largest ε the rates (α, β) prove: max of log((1−δ−β)/α), log((1−δ−α)/β), 0."""
    best = 0.0
    for first, second in ((fpr, fnr), (fnr, fpr)):
        numerator = 1.0 - delta - second
        if numerator > 0.0 and first > 0.0:
            best = max(best, math.log(numerator / first))
    return best


def epsilon_lower_bound(positives: FloatArray, negatives: FloatArray, delta: float) -> AuditOutcome:
    """95%-confidence lower bound on ε from scores of the two neighbouring inputs.

    positives, negatives: (N,) test statistics; larger means "the first input". The first
    half of each picks the threshold that maximises the point estimate of ε, the second
    half gives Clopper–Pearson bounds at that threshold.
    """
    delta = check_open_unit("delta", delta)
    half_pos, half_neg = positives.size // 2, negatives.size // 2
    if min(half_pos, half_neg) < 1:
        raise ValueError("need at least 2 scores of each input")
    choose_pos, test_pos = np.sort(positives[:half_pos]), positives[half_pos:]
    choose_neg, test_neg = np.sort(negatives[:half_neg]), negatives[half_neg:]

    candidates = np.unique(np.concatenate([choose_pos, choose_neg]))
    if candidates.size > 4096:
        candidates = np.quantile(candidates, np.linspace(0.0, 1.0, 4096))
    # Rates of "say positive iff score > t" on the selection half.
    fpr = 1.0 - np.searchsorted(choose_neg, candidates, side="right") / half_neg
    fnr = np.searchsorted(choose_pos, candidates, side="right") / half_pos
    # Conservative plug-in: a rate of 0 counts as 1/N so the search prefers supported tails.
    fpr_floor = np.maximum(fpr, 1.0 / half_neg)
    fnr_floor = np.maximum(fnr, 1.0 / half_pos)
    with np.errstate(divide="ignore", invalid="ignore"):
        estimate = np.maximum(
            np.log(np.maximum(1.0 - delta - fnr_floor, 1e-300) / fpr_floor),
            np.log(np.maximum(1.0 - delta - fpr_floor, 1e-300) / fnr_floor),
        )
    threshold = float(candidates[int(np.argmax(estimate))])

    false_positives = int(np.count_nonzero(test_neg > threshold))
    false_negatives = int(np.count_nonzero(test_pos <= threshold))
    fpr_upper = clopper_pearson_upper(false_positives, test_neg.size)
    fnr_upper = clopper_pearson_upper(false_negatives, test_pos.size)
    return AuditOutcome(
        lower_bound=_epsilon_from_rates(fpr_upper, fnr_upper, delta),
        false_positive_rate=false_positives / test_neg.size,
        false_negative_rate=false_negatives / test_pos.size,
        threshold=threshold,
        draws=int(positives.size + negatives.size),
    )


def candidate_values() -> FloatArray:
    """Scalar magnitudes for worst-case gradient coordinates: 0, ±1e-3 … ±1e300."""
    magnitudes = np.concatenate(
        [10.0 ** np.arange(-3, 4, 0.25), 10.0 ** np.arange(4, 301, 8.0), [1.7e308]]
    )
    return np.concatenate([[0.0], magnitudes, -magnitudes])


def farthest_pair(
    candidates: FloatArray, transform: Callable[[FloatArray], FloatArray]
) -> tuple[int, int, float]:
    """Indices (i, j) of the two candidate rows whose transforms are farthest apart in L2.

    candidates: (k, d) inputs; transform maps them to (k, d') noiseless outputs.
    """
    outputs = transform(candidates)
    finite = np.all(np.isfinite(outputs), axis=1)
    if not finite.all():
        # An output that is not finite is itself a leak: report it as infinitely far.
        bad = int(np.argmin(finite))
        return bad, (bad + 1) % len(candidates), math.inf
    peak = float(np.max(np.abs(outputs))) or 1.0
    scaled = outputs / peak
    squared = np.sum(scaled**2, axis=1)
    distances = squared[:, None] + squared[None, :] - 2.0 * scaled @ scaled.T
    i, j = np.unravel_index(int(np.argmax(distances)), distances.shape)
    return int(i), int(j), peak * math.sqrt(max(float(distances[i, j]), 0.0))


def run_distinguisher(
    sample_first: Callable[[int], FloatArray],
    sample_second: Callable[[int], FloatArray],
    direction: FloatArray,
    draws: int,
    delta: float,
) -> AuditOutcome:
    """Draw ``draws`` outputs of each input (rows of (n, d) arrays), project them on
    ``direction`` (first minus second), and bound ε from the projections."""
    draws = check_count("draws", draws, minimum=4)
    norm = float(np.linalg.norm(direction))
    unit = direction / norm if norm > 0.0 and math.isfinite(norm) else direction * 0.0
    positives = sample_first(draws) @ unit
    negatives = sample_second(draws) @ unit
    return epsilon_lower_bound(positives, negatives, delta)


def mechanism_candidates(d: int) -> FloatArray:
    """Candidate per-record gradients (k, d): every coordinate equal to one candidate value,
    or a single non-zero coordinate, plus a dense grid around the truncation's extremum."""
    d = check_count("d", d)
    values = np.concatenate([candidate_values(), np.linspace(-25.0, 25.0, 401)])
    equal = np.repeat(values[:, None], d, axis=1)
    spikes = np.zeros((values.size, d))
    spikes[:, 0] = values
    return np.concatenate([equal, spikes])


def audit_mechanism(
    mechanism: Mechanism,
    *,
    d: int,
    records_per_round: int,
    delta: float,
    draws: int,
    rng: np.random.Generator,
) -> tuple[AuditOutcome, float]:
    """Audit one record's release by ``mechanism`` on its worst-case pair of gradients.

    Local mechanisms: the release is that record's report, drawn with ``privatize``.
    Central mechanisms: the release is the curator's average over ``records_per_round``
    records (the others fixed at zero gradient) plus ``aggregate_noise``.
    Returns the outcome and the L2 distance between the pair's noiseless outputs.
    """
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

        def sampler(gradient: FloatArray) -> Callable[[int], FloatArray]:
            mean = mechanism.contributions(gradient[None, :])[0] / records_per_round
            return lambda n: mean + mechanism.aggregate_noise(d, rng, draws=n)

    outcome = run_distinguisher(sampler(g_first), sampler(g_second), direction, draws, delta)
    return outcome, distance


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


def holder_candidates(model: Model, d: int) -> Records:
    """Candidate single records for ``model``: equal coordinates from 0 to ±1e150, spikes,
    responses ±|v| and 0, and for RMC records with missing covariates."""
    values = candidate_values()
    # Up to 1e150: products such as y·⟨β, x⟩ stay finite, so every candidate is a record an
    # honest holder could hold (larger ones are refused by holder_round as non-finite).
    values = values[np.abs(values) <= 1e150]
    rows = np.concatenate([np.repeat(values[:, None], d, axis=1), np.eye(d) * 1e6])
    if not model.has_response:
        return Records(rows)
    x = np.concatenate([rows, rows, rows])
    y = np.concatenate([np.abs(rows[:, 0]), -np.abs(rows[:, 0]), np.zeros(len(rows))])
    if model.allows_missing:
        holes = x.copy()
        holes[:, 1:] = np.nan
        x = np.concatenate([x, holes])
        y = np.concatenate([y, y])
    return Records(x, y)


def audit_holder_round(
    model: Model,
    mechanism: Mechanism,
    *,
    d: int,
    sigma: float,
    delta: float,
    draws: int,
    rng: np.random.Generator,
) -> tuple[AuditOutcome, float]:
    """Audit what a data holder sends — the (sum, count) report of ``holder_round`` — for a
    holder whose one record is either of the worst-case pair of model records.

    One record per holder makes the report exactly that record's release, the tightest
    case; every output field (the sum and the count) enters the test: a count that
    differed between the pair would be a perfect distinguisher.
    """
    records = holder_candidates(model, d)
    best: tuple[float, int, int, FloatArray, Records] | None = None
    for level in BROADCAST_LEVELS:
        beta = np.full(d, level)
        with np.errstate(all="ignore"):  # candidates whose gradient overflows are dropped
            finite = np.all(np.isfinite(model.gradients(beta, records, sigma)), axis=1)
        pool = records.take(np.flatnonzero(finite))
        contributions = mechanism.contributions(model.gradients(beta, pool, sigma))
        first, second, distance = farthest_pair(contributions, _identity)
        if not math.isfinite(distance):
            return _leak(draws), distance
        if best is None or distance > best[0]:
            best = (distance, first, second, beta, pool)
    assert best is not None
    distance, first, second, beta, pool = best
    gradients = mechanism.contributions(model.gradients(beta, pool, sigma))
    direction = np.append(gradients[first] - gradients[second], 0.0)

    def sampler(index: int) -> Callable[[int], FloatArray]:
        holder = pool.take(slice(index, index + 1))

        def draw(n: int) -> FloatArray:
            out = np.empty((n, d + 1))
            for k in range(n):
                report = holder_round(
                    model=model,
                    beta=beta,
                    records=holder,
                    sigma=sigma,
                    mechanism=mechanism,
                    rng=rng,
                )
                out[k, :d] = report.total
                out[k, d] = report.count
            return out

        return draw

    first_draws = sampler(first)(draws)
    second_draws = sampler(second)(draws)
    if not np.array_equal(np.unique(first_draws[:, d]), np.unique(second_draws[:, d])):
        return _leak(draws), math.inf
    unit = direction / np.linalg.norm(direction)
    positives, negatives = first_draws @ unit, second_draws @ unit
    outcome = epsilon_lower_bound(positives, negatives, delta)
    # The distinguisher has little power at small δ with few draws; the noise level itself
    # is measured precisely: residuals around each input's mean, chi-square interval.
    residuals = np.concatenate([positives - positives.mean(), negatives - negatives.mean()])
    freedom = residuals.size - 2
    squares = float(np.sum(residuals**2))
    low = math.sqrt(squares / chi2.ppf(ONE_SIDED_CONFIDENCE, freedom)) / mechanism.noise_std
    high = math.sqrt(squares / chi2.ppf(1 - ONE_SIDED_CONFIDENCE, freedom)) / mechanism.noise_std
    return replace(outcome, noise_ratio=(low, high)), distance
