"""The statistics of the privacy audit (``ldpem.common.audit.empirical``): Clopper–Pearson bounds on
a distinguisher's error rates, the ε lower bound they imply, and the check of the measured
noise against an independently computed σ_r."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy.stats import beta as beta_distribution
from scipy.stats import chi2, norm

from ldpem.common.core._validation import check_count, check_open_unit, check_positive

__all__ = [
    "NOISE_TOLERANCE",
    "AuditOutcome",
    "clopper_pearson_upper",
    "epsilon_lower_bound",
    "measure_noise_ratio",
    "noise_is_sufficient",
    "reference_noise_std",
]

FloatArray = NDArray[np.float64]
#: Confidence of each one-sided Clopper–Pearson bound; two of them make 95% jointly.
ONE_SIDED_CONFIDENCE = 0.975
#: How far below the reference σ_r the measured noise may be before the noise check fails:
#: the reference and the calibration are both exact, so 2% only absorbs sampling error.
NOISE_TOLERANCE = 0.02


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


def reference_noise_std(*, epsilon: float, delta: float, sensitivity: float) -> float:
    """The smallest σ_r for which one Gaussian release of L2 sensitivity Δ is (ε, δ)-DP.

    From the analytic Gaussian mechanism (Balle & Wang 2018, Theorem 8): N(0, σ_r²I) added
    to a query of sensitivity Δ is (ε, δ)-DP iff
    Φ(Δ/2σ_r − εσ_r/Δ) − e^ε Φ(−Δ/2σ_r − εσ_r/Δ) ≤ δ; the left side decreases in σ_r, and
    σ_r is found by bisection on log σ_r. Written apart from
    ``ldpem.common.core.accounting`` (which calibrates the mechanisms) so that an error in the
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
