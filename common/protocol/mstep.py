"""The aggregate and the M-step: one place, for coordinator and simulator alike.

The aggregate is the correctly rounded sum of the reports' totals (``math.fsum`` per
coordinate, so the order in which reports arrive cannot change a bit of β), divided by the
round's record count, plus the central noise (``CentralNoise``, calibrated on the round's
actual count), times η. Gradient EM's M-step is this one gradient step for every model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpem.common.protocol.construction import CentralNoise

__all__ = ["Step", "aggregate", "m_step"]

FloatArray = NDArray[np.float64]


def aggregate(totals: Sequence[ArrayLike], counts: Sequence[int]) -> tuple[FloatArray, int]:
    """Σ of the reports' totals and of their counts. Each coordinate is the correctly
    rounded sum (``math.fsum``), which does not depend on the order of the reports; ±inf
    or NaN when the sum leaves the float range (the caller checks).

    Parameters
    ----------
    totals : sequence of K array-likes of shape (d,)
        The reports' totals (an array of shape (K, d) works too).
    counts : sequence of K int
        The reports' record counts.

    Returns
    -------
    total : array of shape (d,)
        Σ totals.
    count : int
        Σ counts.
    """
    rows = np.asarray(totals, dtype=np.float64)
    if rows.ndim != 2:
        raise ValueError(f"totals must be a (reports, d) array, got shape {rows.shape}")
    try:
        total = np.array([math.fsum(column) for column in rows.T], dtype=np.float64)
    except (OverflowError, ValueError):  # a sum beyond the float range, or inf − inf
        with np.errstate(over="ignore", invalid="ignore"):
            total = rows.sum(axis=0)
    return total, sum(int(c) for c in counts)


@dataclass(frozen=True)
class Step:
    """One M-step: β^{t+1} (d,), the round's record count, the central noise drawn (or None)."""

    beta: FloatArray
    count: int
    noise: FloatArray | None


def m_step(
    beta: ArrayLike,
    totals: Sequence[ArrayLike],
    counts: Sequence[int],
    *,
    eta: float,
    central: CentralNoise | None = None,
    rng: np.random.Generator | None = None,
    start_from: Callable[[FloatArray], FloatArray] | None = None,
) -> Step:
    """β^{t+1} = β^t + η·(Σ totals / Σ counts + central noise) (docs/MATH.md 1); in the
    start round of a model whose start reads data, β¹ = ``start_from`` of that mean.

    Overflow gives non-finite entries, not an exception: the caller decides (the
    coordinator fails the run).

    Parameters
    ----------
    beta : array-like of shape (d,)
        β^t.
    totals : sequence of K array-likes of shape (d,)
        The round's reported totals.
    counts : sequence of K int
        Their record counts.
    eta : float
        η, the step size.
    central : CentralNoise, optional
        The aggregator's noise (central mechanisms), drawn from ``rng`` with σ_r
        calibrated on this round's count.
    rng : numpy.random.Generator, optional
        Required with ``central``.
    start_from : callable, optional
        The model's ``start_from`` with σ bound, in a start round (``start_round``).

    Returns
    -------
    Step
        ``beta`` β^{t+1} of shape (d,), ``count`` Σ counts, ``noise`` the central noise
        drawn, shape (d,), or None.
    """
    start = np.asarray(beta, dtype=np.float64)
    total, count = aggregate(totals, counts)
    noise: FloatArray | None = None
    if central is not None:
        if rng is None:
            raise ValueError("central noise needs a generator")
        noise = central.draw(count, start.size, rng)
    with np.errstate(over="ignore", invalid="ignore"):
        gradient = total / count
        if noise is not None:
            gradient = gradient + noise
        if start_from is None:
            step: FloatArray = start + eta * gradient
        else:
            step = np.asarray(start_from(gradient), dtype=np.float64)
            if step.shape != start.shape:
                raise ValueError(f"start_from must give shape {start.shape}, got {step.shape}")
    return Step(beta=step, count=count, noise=noise)
