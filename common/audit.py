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
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray
from scipy.stats import beta as beta_distribution
from scipy.stats import chi2, norm

from ldpem.common._validation import check_count, check_open_unit, check_positive
from ldpem.common.mechanisms import Mechanism
from ldpem.common.models import Model, Records
from ldpem.common.rounds import holder_round

__all__ = [
    "NOISE_TOLERANCE",
    "AuditOutcome",
    "audit_holder_round",
    "audit_mechanism",
    "candidate_values",
    "clopper_pearson_upper",
    "epsilon_lower_bound",
    "farthest_pair",
    "measure_noise_ratio",
    "noise_is_sufficient",
    "reference_noise_std",
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
    #: 95% interval for (measured noise std)/(reference σ_r) along the test direction, where
    #: measured (holder_round path; the mechanism path when given a reference). The
    #: reference is an independently computed σ_r when the caller gives one
    #: (``reference_noise_std``), else (holder_round) the mechanism's own; an upper end
    #: below 1 − ``NOISE_TOLERANCE`` means less noise than the reference requires.
    noise_ratio: tuple[float, float] | None = None


#: How far below the reference σ_r the measured noise may be before the noise check fails:
#: the reference and the calibration are both exact, so 2% only absorbs sampling error.
NOISE_TOLERANCE = 0.02


def reference_noise_std(*, epsilon: float, delta: float, sensitivity: float) -> float:
    """The smallest σ_r for which one Gaussian release of L2 sensitivity Δ is (ε, δ)-DP.

    From the analytic Gaussian mechanism (Balle & Wang 2018, Theorem 8): N(0, σ_r²I) added
    to a query of sensitivity Δ is (ε, δ)-DP iff
    Φ(Δ/2σ_r − εσ_r/Δ) − e^ε Φ(−Δ/2σ_r − εσ_r/Δ) ≤ δ; the left side decreases in σ_r, and
    σ_r is found by bisection on log σ_r. Written apart from
    ``ldpem.common.accounting`` (which calibrates the mechanisms) so that an error in the
    calibration cannot also be in the audit's yardstick; tests/common/test_audit.py checks
    it against Google's dp_accounting (privacy loss distributions).
    """
    epsilon = check_positive("epsilon", epsilon)
    delta = check_open_unit("delta", delta)
    sensitivity = check_positive("sensitivity", sensitivity)

    def excess(log_ratio: float) -> float:
        ratio = math.exp(log_ratio)  # σ_r/Δ
        first = float(norm.cdf(0.5 / ratio - epsilon * ratio))
        second = math.exp(epsilon + float(norm.logcdf(-0.5 / ratio - epsilon * ratio)))
        return first - second - delta

    low, high = -20.0, 20.0  # σ_r/Δ from 2e-9 to 5e8: any (ε, δ) with ε ≤ 1e8, δ ≥ 1e-300
    if excess(low) <= 0.0 or excess(high) > 0.0:
        raise ValueError(f"no noise_std/sensitivity in [e^-20, e^20] fits epsilon={epsilon!r}")
    for _ in range(200):
        middle = 0.5 * (low + high)
        if excess(middle) > 0.0:
            low = middle
        else:
            high = middle
    return sensitivity * math.exp(high)


def noise_is_sufficient(noise_ratio: tuple[float, float] | None) -> bool:
    """Whether a measured 95% interval of noise/reference σ_r allows the reference noise:
    its upper end is at least 1 − NOISE_TOLERANCE (True when nothing was measured)."""
    return noise_ratio is None or noise_ratio[1] >= 1.0 - NOISE_TOLERANCE


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

    The first half of each sample picks the threshold that maximises the point estimate of
    ε, the second half gives Clopper–Pearson bounds at that threshold.

    Parameters
    ----------
    positives : array of shape (N,)
        Test statistics of outputs of the first input; larger means "the first input".
    negatives : array of shape (M,)
        Test statistics of outputs of the second input (N, M ≥ 2).
    delta : float
        The δ at which ε is bounded, in (0, 1).

    Returns
    -------
    AuditOutcome
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


#: Seed of the random magnitudes and sign patterns: every audit, on every machine, tries
#: the same pool, so a result can be reproduced.
CANDIDATE_SEED = 20_251_126
#: Grid magnitudes per decade: a step of 10^(1/8) ≈ 1.33 < 2 puts a grid point in every
#: binade [2^k, 2^(k+1)) of the normal floats.
PER_DECADE = 8
#: Log-uniform random magnitudes added to the grid (between its points, seeded).
RANDOM_MAGNITUDES = 2048
#: Random mixed-sign, mixed-magnitude rows added for d > 1.
RANDOM_ROWS = 4096
#: Entries of the (chunk, k) block of pair distances ``farthest_pair`` holds at once: 32 MiB.
PAIR_BLOCK = 1 << 22

_TINY = float(np.finfo(np.float64).tiny)  # 2.2e-308, the smallest normal float
_HUGE = float(np.finfo(np.float64).max)  # 1.8e308


def _magnitudes() -> FloatArray:
    """Positive magnitudes from the smallest subnormal to the largest float: every 1/8
    decade from 2.2e-308 to 1.7e308 (so every binade), both ends, and seeded log-uniform
    draws between the grid points."""
    exponents = np.arange(
        math.ceil(PER_DECADE * math.log10(_TINY)), math.floor(PER_DECADE * math.log10(_HUGE)) + 1
    )
    grid = 10.0 ** (exponents / PER_DECADE)
    rng = np.random.default_rng(CANDIDATE_SEED)
    # 2^u for u uniform in [−1022, 1024): log-uniform over the normal range, never inf.
    drawn = np.exp2(rng.uniform(-1022.0, np.nextafter(1024.0, 0.0), RANDOM_MAGNITUDES))
    ends = np.array([5e-324, _TINY, _HUGE])
    return np.unique(np.concatenate([grid, drawn, ends]))


def candidate_values() -> FloatArray:
    """Scalar values for worst-case gradient coordinates: 0 and ± every magnitude of
    ``_magnitudes`` (about 7,000: each 1/8 decade over the whole float range plus seeded
    log-uniform draws), so no binade a mechanism could misbehave in goes untried.

    Returns
    -------
    values : array of shape (k,)
    """
    magnitudes = _magnitudes()
    return np.concatenate([[0.0], magnitudes, -magnitudes])


def _patterns(values: FloatArray, d: int) -> FloatArray:
    """Rows (k, d) built from scalar ``values``: all coordinates equal, a single non-zero
    coordinate, alternating signs (+v, −v, +v, …), and seeded random rows whose coordinates
    have independent random signs and magnitudes drawn from ``values``."""
    equal = np.repeat(values[:, None], d, axis=1)
    if d == 1:
        return equal
    spikes = np.zeros((values.size, d))
    spikes[:, 0] = values
    alternating = equal * np.where(np.arange(d) % 2 == 0, 1.0, -1.0)
    rng = np.random.default_rng(CANDIDATE_SEED + d)
    mixed = rng.choice(values, size=(RANDOM_ROWS, d)) * rng.choice([-1.0, 1.0], (RANDOM_ROWS, d))
    return np.concatenate([equal, spikes, alternating, mixed])


def farthest_pair(
    candidates: FloatArray, transform: Callable[[FloatArray], FloatArray]
) -> tuple[int, int, float]:
    """Indices (i, j) of the two candidate rows whose transforms are farthest apart in L2.

    Parameters
    ----------
    candidates : array of shape (k, d)
        The inputs.
    transform : callable
        Maps an array of shape (k, d) to the noiseless outputs, shape (k, d').

    Returns
    -------
    i, j : int
        Row indices into ``candidates`` (i = j = 0 when all outputs are equal).
    distance : float
        ‖transform(candidates)[i] − transform(candidates)[j]‖₂; inf if an output is not
        finite (itself a leak).

    Exact, in bounded memory: identical outputs are merged first (many candidates saturate
    to the same value); a pair found by two farthest-point sweeps gives a lower bound L on
    the diameter, and since ‖o_i − o_j‖ ≤ ‖o_i − c‖ + max_k ‖o_k − c‖ for the centroid c,
    only outputs with ‖o_i − c‖ + max ≥ L can belong to the farthest pair. The distances
    among those are computed in blocks of at most ``PAIR_BLOCK`` entries (32 MiB), so the
    memory is O(PAIR_BLOCK + k·d') for any k, and the time O(k'²·d') for the k' outputs kept.
    """
    outputs = transform(candidates)
    finite = np.all(np.isfinite(outputs), axis=1)
    if not finite.all():
        # An output that is not finite is itself a leak: report it as infinitely far.
        bad = int(np.argmin(finite))
        return bad, (bad + 1) % len(candidates), math.inf
    peak = float(np.max(np.abs(outputs))) or 1.0
    distinct, first_seen = np.unique(outputs / peak, axis=0, return_index=True)
    if len(distinct) == 1:
        return 0, 0, 0.0
    centre = distinct.mean(axis=0)
    radius = np.sqrt(np.sum((distinct - centre) ** 2, axis=1))
    start = int(np.argmax(radius))
    end = int(np.argmax(np.sum((distinct - distinct[start]) ** 2, axis=1)))
    other = int(np.argmax(np.sum((distinct - distinct[end]) ** 2, axis=1)))
    lower = math.sqrt(float(np.sum((distinct[end] - distinct[other]) ** 2)))
    # The slack covers rounding in the radii (outputs are scaled to |entry| ≤ 1).
    kept = np.flatnonzero(radius + radius.max() >= lower - 1e-9)
    points = distinct[kept]
    squared = np.sum(points**2, axis=1)
    best, best_i, best_j = -1.0, end, other
    rows = max(1, PAIR_BLOCK // len(points))
    for begin in range(0, len(points), rows):
        block = points[begin : begin + rows]
        distances = squared[begin : begin + rows, None] + squared[None, :] - 2.0 * block @ points.T
        flat = int(np.argmax(distances))
        i, j = divmod(flat, len(points))
        if distances[i, j] > best:
            best, best_i, best_j = float(distances[i, j]), int(kept[begin + i]), int(kept[j])
    i, j = int(first_seen[best_i]), int(first_seen[best_j])
    difference = outputs[i] / peak - outputs[j] / peak
    return i, j, peak * math.sqrt(float(np.sum(difference**2)))


def measure_noise_ratio(
    positives: FloatArray, negatives: FloatArray, reference: float
) -> tuple[float, float]:
    """95% interval for (noise std)/``reference`` from projections of draws of two inputs:
    the residuals around each input's mean, chi-square interval (each end one-sided at
    97.5%). The distinguisher has little power at small δ; the noise level itself is
    measured precisely (2·10⁴ draws per input: ±0.7%).

    Parameters
    ----------
    positives, negatives : arrays of shape (N,) and (M,)
        Projections of the outputs of each input on one unit direction (N + M ≥ 3).
    reference : float
        The σ_r the noise is compared with (> 0).

    Returns
    -------
    low, high : float
    """
    reference = check_positive("reference", reference)
    residuals = np.concatenate([positives - positives.mean(), negatives - negatives.mean()])
    freedom = residuals.size - 2
    if freedom < 1:
        raise ValueError(f"need at least 3 projections in all, got {residuals.size}")
    squares = float(np.sum(residuals**2))
    low = math.sqrt(squares / chi2.ppf(ONE_SIDED_CONFIDENCE, freedom)) / reference
    high = math.sqrt(squares / chi2.ppf(1 - ONE_SIDED_CONFIDENCE, freedom)) / reference
    return low, high


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


def mechanism_candidates(d: int) -> FloatArray:
    """Candidate per-record gradients: the ``_patterns`` of every candidate value and of a
    dense grid around the truncation's extremum.

    Returns
    -------
    candidates : array of shape (k, d)
    """
    d = check_count("d", d)
    values = np.concatenate([candidate_values(), np.linspace(-25.0, 25.0, 401)])
    return _patterns(values, d)


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
    """Candidate single records for ``model``: the ``_patterns`` of every candidate value
    (the whole float range, as for the mechanism path) and spikes on each coordinate;
    responses ±|v| and 0, and for RMC records with missing covariates.

    Returns
    -------
    Records
        k candidate records: ``x`` of shape (k, d), ``y`` of shape (k,) for models with a
        response.
    """
    rows = np.concatenate([_patterns(candidate_values(), d), np.eye(d) * 1e6])
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
    reference_noise_std: float | None = None,
) -> tuple[AuditOutcome, float]:
    """Audit what a data holder sends — the (sum, count) report of ``holder_round`` — for a
    holder whose one record is either of the worst-case pair of model records.

    One record per holder makes the report exactly that record's release, the tightest
    case; every output field (the sum and the count) enters the test: a count that
    differed between the pair would be a perfect distinguisher. When the mechanism's noise
    is shared (``honest_holders`` > 1, docs/SECAGG.md), the release is the sum of that
    holder's report and the reports of ``honest_holders`` − 1 holders without records,
    each from ``holder_round``: what a round releases with exactly t_min honest holders.
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
        Dimension.
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
    best: tuple[float, int, int, FloatArray] | None = None
    for level in BROADCAST_LEVELS:
        beta = np.full(d, level)
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
            out = np.empty((n, d + 1))
            for k in range(n):
                # The others' reports are summed as the M-step sums them (math.fsum).
                rows = [report(holder)]
                rows += [report(nobody) for _ in range(mechanism.honest_holders - 1)]
                out[k] = [math.fsum(column) for column in zip(*rows, strict=True)]
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
    # is measured precisely.
    return replace(
        outcome, noise_ratio=measure_noise_ratio(positives, negatives, reference)
    ), distance
