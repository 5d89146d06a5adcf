"""Privacy accounting for compositions of Gaussian mechanisms (docs/MATH.md, section 4).

A Gaussian mechanism with L2 sensitivity Δ and per-coordinate noise std σ_r, run k times on
the same record, is characterised by one number, the *privacy ratio*

    μ = √(Σ_i Δ_i² / σ_{r,i}²)          (= √k · Δ/σ_r for k identical participations).

Two conversions from μ to (ε, δ) are offered:

``"paper"``  zCDP: ρ = μ²/2 and ε = ρ + 2√(ρ log(1/δ)). This is what the paper's calibration
             (Algorithm 2: ρ = ε̃² per record) amounts to; use it to reproduce the paper.
``"exact"``  Gaussian differential privacy (Dong, Roth & Su 2019): the composition is exactly
             μ-GDP, and δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) is tight. It needs 15–28% less
             noise than ``"paper"`` at the same (ε, δ). The default.

Functions go both ways: the (ε at δ) spent for a given μ, and the μ (hence σ_r) needed for a
target (ε, δ).

``event_epsilon`` takes a mechanism's privacy as data (``ldpem.common.core.privacy_events``).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, get_args

import numpy as np
from numpy.typing import NDArray
from scipy.special import erfcx, log_ndtr

from ldpem.common.core import privacy_events as events
from ldpem.common.core._validation import check_count, check_open_unit, check_positive

__all__ = [
    "DEFAULT_ACCOUNTING",
    "Accounting",
    "Budget",
    "epsilon_for_ratio",
    "epsilon_spent",
    "epsilon_tilde",
    "event_epsilon",
    "gaussian_events",
    "gaussian_noise_std",
    "gdp_delta",
    "noise_std_for",
    "ratio_for_budget",
    "ratio_for_noise",
    "zcdp_epsilon",
]

Accounting = Literal["exact", "paper"]
DEFAULT_ACCOUNTING: Accounting = "exact"
ACCOUNTING_MODES: tuple[str, ...] = get_args(Accounting)


@dataclass(frozen=True)
class Budget:
    """A privacy budget per record: (ε, δ) under an ``accounting`` ("exact" or "paper",
    for Gaussian noise). What a holder, a run and a study calibrate their noise for, and
    what a ledger charges against."""

    epsilon: float
    delta: float
    accounting: str = DEFAULT_ACCOUNTING


def _check_accounting(accounting: str) -> Accounting:
    if accounting not in ACCOUNTING_MODES:
        raise ValueError(f"accounting must be one of {ACCOUNTING_MODES}, got {accounting!r}")
    return accounting  # type: ignore[return-value]


def epsilon_tilde(epsilon: float, delta: float) -> float:
    """ε̃ = √(log(1/δ) + ε) − √(log(1/δ)) (Algorithm 2), in a cancellation-free form.

    ε̃² is the zCDP parameter ρ whose conversion ρ + 2√(ρ log(1/δ)) equals ε exactly.
    """
    epsilon = check_positive("epsilon", epsilon)
    delta = check_open_unit("delta", delta)
    log_inv_delta = -math.log(delta)
    return epsilon / (math.sqrt(log_inv_delta + epsilon) + math.sqrt(log_inv_delta))


def _gaussian_pairs(
    sensitivity: float | Iterable[float], noise_std: float | Iterable[float]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Δ_i and σ_{r,i} as equal-length float arrays (a scalar goes with every entry),
    validated: Δ finite ≥ 0, σ_r finite > 0."""
    deltas = np.atleast_1d(np.asarray(sensitivity, dtype=np.float64))
    stds = np.atleast_1d(np.asarray(noise_std, dtype=np.float64))
    if deltas.size != stds.size and 1 not in (deltas.size, stds.size):
        raise ValueError(
            f"sensitivity and noise_std must have the same length, got {deltas.size} and "
            f"{stds.size}"
        )
    for value in deltas:
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"sensitivity must be a finite number >= 0, got {value!r}")
    for value in stds:
        check_positive("noise_std", value)
    return deltas, stds


def ratio_for_noise(
    sensitivity: float | Iterable[float],
    noise_std: float | Iterable[float],
    participations: int = 1,
) -> float:
    """μ = √(participations · Σ Δ_i²/σ_{r,i}²) for Gaussian mechanisms applied to one record.

    ``sensitivity`` and ``noise_std`` are scalars, or equal-length sequences (one entry per
    participation with its own Δ and σ_r; then leave ``participations`` at 1).
    """
    participations = check_count("participations", participations)
    deltas, stds = _gaussian_pairs(sensitivity, noise_std)
    ratios_squared = (deltas / stds) ** 2
    return math.sqrt(participations * float(np.sum(ratios_squared)))


def gaussian_events(
    sensitivity: float | Iterable[float], noise_std: float | Iterable[float]
) -> tuple[events.GaussianEvent, ...]:
    """One ``GaussianEvent`` per (Δ_i, σ_{r,i}) pair, as ``ratio_for_noise`` takes them."""
    deltas, stds = _gaussian_pairs(sensitivity, noise_std)
    pairs = np.broadcast_arrays(deltas, stds)
    return tuple(events.GaussianEvent(float(a), float(b)) for a, b in zip(*pairs, strict=True))


def zcdp_epsilon(rho: float, delta: float) -> float:
    """ε = ρ + 2√(ρ log(1/δ)): the conversion of ρ-zCDP the paper uses."""
    if not math.isfinite(rho) or rho < 0:
        raise ValueError(f"rho must be a finite number >= 0, got {rho!r}")
    delta = check_open_unit("delta", delta)
    return rho + 2.0 * math.sqrt(rho * -math.log(delta))


def gdp_delta(epsilon: float, mu: float) -> float:
    """Tight δ(ε) of μ-GDP: Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2), to a relative ~1e-13
    (``_log_gdp_delta``)."""
    if not math.isfinite(epsilon) or epsilon < 0:
        raise ValueError(f"epsilon must be a finite number >= 0, got {epsilon!r}")
    if mu == 0:
        return 0.0
    mu = check_positive("mu", mu)
    return math.exp(_log_gdp_delta(epsilon, mu))


_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_SQRT_HALF_PI = math.sqrt(0.5 * math.pi)
#: Where δ is summed as a series in μ (``_mills_difference``): μ·max(1, |a|) up to this.
_SERIES_REACH = 1.0


def _mills(x: float) -> float:
    """The Mills ratio R(x) = Φ(x)/φ(x) = √(π/2)·erfcx(−x/√2), to full relative precision."""
    return _SQRT_HALF_PI * float(erfcx(-x / math.sqrt(2.0)))


#: Below a = −_FRACTION_FROM, R'(a) comes from the continued fraction: 1 + aR(a) would
#: lose log10(a²) digits there.
_FRACTION_FROM = 4.0


def _mills_slope(a: float, mills: float) -> float:
    """R'(a) = 1 + aR(a) for the Mills ratio ``mills`` = R(a), without its cancellation.

    For z = −a ≥ 4, from Laplace's continued fraction R(−z) = 1/(z + K),
    K = 1/(z + 2/(z + 3/(z + …))): R'(−z) = 1 − zR = K·R, all terms positive. 80 levels
    give K to an ulp for every z ≥ 4 (checked against mpmath; ~35 suffice at z = 4).
    """
    if a > -_FRACTION_FROM:
        return 1.0 + a * mills
    z = -a
    tail = 0.0
    for k in range(80, 1, -1):
        tail = k / (z + tail)
    return mills / (z + tail)


def _mills_difference(a: float, mu: float) -> float:
    """R(a) − R(a − μ) by its Taylor series in μ, for μ·max(1, |a|) ≤ ``_SERIES_REACH``.

    The series Σ_{n≥1} (−1)^{n+1} R⁽ⁿ⁾(a) μⁿ/n! has R⁽ⁿ⁾ > 0 (R⁽ⁿ⁾(x) = ∫₀^∞ tⁿ e^{xt−t²/2} dt)
    and terms falling by about μ/|a| (|a| ≥ 1) or μ/√n, so its sum keeps the precision of
    its first term μR'(a) (``_mills_slope``). The others follow from R' = 1 + xR:
    R⁽ⁿ⁺¹⁾ = n·R⁽ⁿ⁻¹⁾ + a·R⁽ⁿ⁾, which for a < 0 cancels (relative error × a²/(n + 1) per
    step) but whose terms fall faster (× μ/|a|): the errors they carry shrink as
    (μ|a|)ⁿ/n!, so the sum stays within a few ulps.
    """
    previous = _mills(a)  # R⁽ⁿ⁻¹⁾(a)
    current = _mills_slope(a, previous)  # R⁽ⁿ⁾(a)
    total = 0.0
    weight = 1.0  # μⁿ/n!
    for n in range(1, 400):
        weight *= mu / n
        term = weight * current
        total += term if n % 2 else -term
        if term <= 1e-17 * total:
            return total
        previous, current = current, n * previous + a * current
    raise ArithmeticError(f"no convergence of the series at a={a!r}, mu={mu!r}")


def _log_gdp_delta(epsilon: float, mu: float) -> float:
    """log δ(ε; μ) of μ-GDP for ε ≥ 0, μ > 0; its error, ~a²·2⁻⁵³, is the relative error
    of δ: below 1e-13 wherever δ ≥ 1e-100.

    With a = μ/2 − ε/μ, R the Mills ratio and φ the normal density, e^ε·φ(a − μ) = φ(a)
    exactly, so δ = Φ(a) − e^ε Φ(a − μ) = φ(a)·(R(a) − R(a − μ)). The two terms of the
    textbook form agree to about log10(|a|/μ) digits — 7 at ε = 5.6e-6, δ = 1e-100 — and
    their float difference keeps only what is left of the 16 (which put a calibration
    5e-6 above its δ). Here R(a) − R(a − μ) is a series in μ where μ·max(1, |a|) ≤ 1
    (``_mills_difference``). Elsewhere, for a ≤ 0, 1 − R(a − μ)/R(a) ≥ 1/(2.1·(1 + a²))
    (measured over the region), so the Mills ratios are subtracted as they are, losing at
    most log10(2.1·(1 + a²)) digits (3 at δ = 1e-100); for a > 0, Φ(a) ≥ 1/2 and δ is not
    small, and the terms are subtracted in log space (e^ε would overflow past ε ≈ 709).
    Checked against mpmath at 60 digits (tests/common/test_calibration_precision.py).
    """
    ratio = epsilon / mu
    half = 0.5 * mu
    a, b = half - ratio, -half - ratio  # b = a − μ, both from the same ε/μ
    if mu * max(1.0, abs(a)) <= _SERIES_REACH:
        difference = _mills_difference(a, mu)
    elif a <= 0.0:
        difference = _mills(a) - _mills(b)
    else:
        log_first = float(log_ndtr(a))
        shift = epsilon + float(log_ndtr(b)) - log_first  # log(e^ε Φ(b)/Φ(a)) < 0
        return log_first + _log1mexp(shift)
    if difference <= 0.0:
        # Underflow, at μ/a² < 1e-308 only: there log δ < −a²/2 < −1e200 anyway.
        return -math.inf
    return -0.5 * a * a - _LOG_SQRT_2PI + math.log(difference)


def _log1mexp(x: float) -> float:
    """log(1 − eˣ) for x < 0, without cancellation at either end (Mächler 2012)."""
    return math.log(-math.expm1(x)) if x > -math.log(2.0) else math.log1p(-math.exp(x))


def _brentq(
    f: Callable[[float], float], xa: float, xb: float, *, xtol: float, rtol: float
) -> float:
    """Root of f in [xa, xb] by Brent's method: a line-by-line port of scipy's C ``brentq``
    (scipy/optimize/Zeros/brentq.c, 100 iterations), which gives bit-identical roots
    (tests/common/test_brentq.py). Here because ``import scipy.optimize`` also loads
    scipy.linalg, .sparse, .spatial and .fft: ~30 % of every agent's start-up for one call."""
    maxiter = 100
    xpre, xcur = xa, xb
    xblk = fblk = spre = scur = 0.0
    fpre, fcur = f(xpre), f(xcur)
    if fpre == 0:
        return xpre
    if fcur == 0:
        return xcur
    if math.copysign(1.0, fpre) == math.copysign(1.0, fcur):
        raise ValueError("f(a) and f(b) must have different signs")
    for _ in range(maxiter):
        if fpre != 0 and fcur != 0 and math.copysign(1.0, fpre) != math.copysign(1.0, fcur):
            xblk, fblk = xpre, fpre
            spre = scur = xcur - xpre
        if abs(fblk) < abs(fcur):
            xpre, xcur, xblk = xcur, xblk, xcur
            fpre, fcur, fblk = fcur, fblk, fcur
        delta = (xtol + rtol * abs(xcur)) / 2
        sbis = (xblk - xcur) / 2
        if fcur == 0 or abs(sbis) < delta:
            return xcur
        if abs(spre) > delta and abs(fcur) < abs(fpre):
            if xpre == xblk:
                stry = -fcur * (xcur - xpre) / (fcur - fpre)
            else:
                dpre = (fpre - fcur) / (xpre - xcur)
                dblk = (fblk - fcur) / (xblk - xcur)
                stry = -fcur * (fblk * dblk - fpre * dpre) / (dblk * dpre * (fblk - fpre))
            if 2 * abs(stry) < min(abs(spre), 3 * abs(sbis) - delta):
                spre, scur = scur, stry
            else:
                spre = scur = sbis
        else:
            spre = scur = sbis
        xpre, fpre = xcur, fcur
        if abs(scur) > delta:
            xcur += scur
        else:
            xcur += delta if sbis > 0 else -delta
        fcur = f(xcur)
    raise ArithmeticError(f"brentq: no convergence after {maxiter} iterations")


#: Brent's relative tolerance: scipy's smallest allowed, 4 ulps (its ``_rtol``).
_RTOL = 4.0 * sys.float_info.epsilon


def _solve(f: Callable[[float], float], *, increasing: bool) -> float:
    """The root x > 0 of a monotone f, negative (``increasing``) or positive below it and
    of the other sign above: bracketed in [x, 2x] by doubling or halving from 1, then
    Brent's method to a relative 4 ulps (an absolute tolerance such as 1e-12 is a relative
    1e-6 for a root of 1e-6)."""
    sign = 1.0 if increasing else -1.0

    def below(x: float) -> bool:
        return sign * f(x) < 0.0

    high = 1.0
    while below(high):
        high *= 2.0
    low = 0.5 * high
    while not below(low):
        high, low = low, 0.5 * low
    return _brentq(f, low, high, xtol=_RTOL * low, rtol=_RTOL)


def _gdp_epsilon(mu: float, delta: float) -> float:
    """The ε of μ-GDP at δ: the root of δ(ε; μ) = δ, rounded up so that the float δ there is
    at most the target (an ε a hair too small would understate what was spent). Solved on
    log δ, whose relative precision ``_log_gdp_delta`` keeps."""
    target = math.log(delta)

    def excess(epsilon: float) -> float:
        return _log_gdp_delta(epsilon, mu) - target

    if excess(0.0) <= 0.0:
        return 0.0
    epsilon = _solve(excess, increasing=False)
    while excess(epsilon) > 0.0:
        epsilon = math.nextafter(epsilon, math.inf)
    return epsilon


def epsilon_for_ratio(mu: float, delta: float, accounting: str = DEFAULT_ACCOUNTING) -> float:
    """ε spent at ``delta`` by a composition with privacy ratio ``mu`` (see module doc)."""
    accounting = _check_accounting(accounting)
    if not math.isfinite(mu) or mu < 0:
        raise ValueError(f"mu must be a finite number >= 0, got {mu!r}")
    delta = check_open_unit("delta", delta)
    if accounting == "paper":
        return zcdp_epsilon(mu * mu / 2.0, delta)
    return _gdp_epsilon(mu, delta)


def ratio_for_budget(epsilon: float, delta: float, accounting: str = DEFAULT_ACCOUNTING) -> float:
    """The largest privacy ratio μ whose composition is (ε, δ)-DP under ``accounting``."""
    accounting = _check_accounting(accounting)
    epsilon = check_positive("epsilon", epsilon)
    delta = check_open_unit("delta", delta)
    if accounting == "paper":
        return math.sqrt(2.0) * epsilon_tilde(epsilon, delta)
    # δ(ε; μ) increases with μ. Solved on log δ, to 4 ulps of μ, then stepped down until the
    # float δ is at most the target: the achieved δ is within ~1e-13 of it, relative
    # (tests/common/test_calibration_precision.py checks 1e-9 against mpmath).
    target = math.log(delta)

    def excess(mu: float) -> float:
        return _log_gdp_delta(epsilon, mu) - target

    mu = _solve(excess, increasing=True)
    while excess(mu) > 0.0:
        mu = math.nextafter(mu, 0.0)
    return mu


@lru_cache(maxsize=1024)
def gaussian_noise_std(
    epsilon: float, delta: float, sensitivity: float, accounting: str, participations: int
) -> float:
    """``noise_std_for``, cached: the exact accounting solves for a root, and every report of
    a run asks again (``Mechanism.calibrated``)."""
    return noise_std_for(
        epsilon=epsilon,
        delta=delta,
        sensitivity=sensitivity,
        participations=participations,
        accounting=accounting,
    )


def noise_std_for(
    *,
    epsilon: float,
    delta: float,
    sensitivity: float,
    participations: int = 1,
    accounting: str = DEFAULT_ACCOUNTING,
) -> float:
    """Per-coordinate σ_r so that ``participations`` Gaussian releases of L2 sensitivity
    ``sensitivity`` are together (ε, δ)-DP: σ_r = √k · Δ / μ(ε, δ)."""
    sensitivity = check_positive("sensitivity", sensitivity)
    participations = check_count("participations", participations)
    mu = ratio_for_budget(epsilon, delta, accounting)
    return math.sqrt(participations) * sensitivity / mu


def _leaves(event: events.DpEvent, count: int) -> Iterator[tuple[events.DpEvent, int]]:
    """The events a composition is made of, each with how often it is repeated."""
    if isinstance(event, events.SelfComposedEvent):
        yield from _leaves(event.event, count * event.count)
    elif isinstance(event, events.ComposedEvent):
        for part in event.events:
            yield from _leaves(part, count)
    else:
        yield event, count


def event_epsilon(
    event: events.DpEvent, delta: float, accounting: str = DEFAULT_ACCOUNTING
) -> float:
    """ε at ``delta`` that the releases of ``event`` cost a record (module docstring): the
    Gaussian events' μ = √(Σ count·Δ²/σ²) (a ``RatioEvent``'s Δ/σ is its ratio) under
    ``accounting``, plus the pure events' ε.
    ValueError for an event with its own accountant composed with another, or an event
    type the accountant does not know."""
    accounting = _check_accounting(accounting)
    delta = check_open_unit("delta", delta)
    ratios_squared: list[float] = []
    pure: list[float] = []
    own: dict[events.AccountedEvent, int] = {}
    for leaf, count in _leaves(event, 1):
        if isinstance(leaf, events.NonPrivateEvent):
            return math.inf
        if isinstance(leaf, events.GaussianEvent):
            ratios_squared.append(count * (leaf.sensitivity / leaf.noise_std) ** 2)
        elif isinstance(leaf, events.RatioEvent):
            ratios_squared.append(count * leaf.ratio * leaf.ratio)
        elif isinstance(leaf, events.PureEvent):
            pure.append(count * leaf.epsilon)
        elif isinstance(leaf, events.AccountedEvent):
            own[leaf] = own.get(leaf, 0) + count
        elif not isinstance(leaf, events.NoOpEvent):
            raise ValueError(f"the accountant cannot compose a {type(leaf).__name__}")
    if own:
        if len(own) > 1 or ratios_squared or pure:
            names = sorted({type(leaf).__name__ for leaf in own})
            raise ValueError(f"{', '.join(names)} composes with no other event")
        ((leaf, count),) = own.items()
        return leaf.epsilon(delta, count)
    spent = math.fsum(pure)
    total = math.fsum(ratios_squared)
    if total > 0.0:
        spent += epsilon_for_ratio(math.sqrt(total), delta, accounting)
    return spent


def epsilon_spent(
    *,
    sensitivity: float | Iterable[float],
    noise_std: float | Iterable[float],
    delta: float,
    participations: int = 1,
    accounting: str = DEFAULT_ACCOUNTING,
) -> float:
    """ε at ``delta`` spent by Gaussian releases with the given Δ and σ_r (see
    ratio_for_noise), ``participations`` times: ``event_epsilon`` of their events."""
    participations = check_count("participations", participations)
    releases = events.ComposedEvent(gaussian_events(sensitivity, noise_std))
    return event_epsilon(events.SelfComposedEvent(releases, participations), delta, accounting)
