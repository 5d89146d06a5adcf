"""One data holder's round: gradients at β^t → mechanism → sum (docs/FEDERATED.md).

This is the single implementation used by the hospital agent and by the in-process
simulator. Records are processed in chunks so that memory stays bounded however many
records a holder has, each chunk's contributions summed in the mechanism's arithmetic
(``mechanisms.sum_arithmetic``: floats, or exact integers for noise shares); the sum is
finished once at the end (the local noise, or the quantization and the share).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ldpem.common.core._validation import check_count, check_positive
from ldpem.common.mechanisms import Mechanism, sum_arithmetic
from ldpem.common.models import Model, Records

__all__ = ["DEFAULT_CHUNK", "HolderReport", "holder_round"]

#: Records per chunk: (chunk × d) float64 intermediates stay at a few MiB for d ≤ 50.
DEFAULT_CHUNK = 1 << 15
#: Largest |total| a round may reach: half the float range, a margin for rounding.
_SUM_LIMIT = float(np.finfo(np.float64).max) / 2.0
#: Gaussian draws beyond 64 standard deviations have probability below 1e-890.
_NOISE_TAIL = 64.0


@dataclass(frozen=True)
class HolderReport:
    """What a data holder sends for one round: the privatized sum (d,) and its record count."""

    total: NDArray[np.float64]
    count: int


def holder_round(
    *,
    model: Model,
    beta: NDArray[np.float64],
    records: Records,
    sigma: float,
    mechanism: Mechanism,
    rng: np.random.Generator,
    chunk: int = DEFAULT_CHUNK,
    in_start_round: bool = False,
) -> HolderReport:
    """Privatized sum of the per-record gradients ∇q_i(β; β) of ``records`` at ``beta``
    (with ``in_start_round``: of the model's ``start_statistics``, in a run's start round).

    Total for every mechanism with a bound (all but ``none``): a gradient that overflows
    or is NaN, whatever β and σ the (untrusted) coordinator chose, gets the bounded
    contribution the mechanism assigns it, and the report is sent as usual. Raising
    instead would make the sending of a report depend on the records. Validation uses
    public values only (β, σ, the count, d, the mechanism's bound and noise) and happens
    before any gradient is computed: it refuses a round whose sum of ``count`` bounded
    contributions plus noise could leave the float range, so the total is always finite.

    Parameters
    ----------
    model : Model
        Gives the per-record gradients.
    beta : array of shape (p,)
        β^t, the coordinator's (untrusted) estimate; must be finite. p =
        ``model.parameter_dim(d)`` (d but for a mixture).
    records : Records
        The n records of this holder's round (``x`` of shape (n, d)).
    sigma : float
        The model's noise std σ (> 0), not the privacy noise.
    mechanism : Mechanism
        The holder's mechanism; its ``noise_std`` is σ_r.
    rng : numpy.random.Generator
        The holder's noise stream of the round.
    chunk : int
        Records whose gradients are held in memory at once (≥ 1).
    in_start_round : bool
        Whether this is the start round of a model whose start reads data
        (``protocol.start_round``).

    Returns
    -------
    HolderReport
        ``total`` of shape (p,), ``count`` = n.
    """
    sigma = check_positive("sigma", sigma)
    chunk = check_count("chunk", chunk)
    beta = np.asarray(beta, dtype=np.float64)
    size = model.parameter_dim(records.d)
    if beta.shape != (size,):
        raise ValueError(f"beta must have shape ({size},), got {beta.shape}")
    if not np.all(np.isfinite(beta)):
        raise ValueError("beta must be finite, got NaN or inf")
    bound = mechanism.record_bound(size)
    if math.isfinite(bound):
        noise = mechanism.noise_std if mechanism.is_local else 0.0
        largest = records.n * bound + _NOISE_TAIL * noise * math.sqrt(records.n)
        if not largest <= _SUM_LIMIT:
            raise ValueError(
                f"{records.n} records with contributions bounded by {bound!r} and noise std "
                f"{noise!r} could overflow the float range (limit {_SUM_LIMIT:.3g})"
            )
    arithmetic = sum_arithmetic(mechanism)
    total = arithmetic.empty_sum(size)
    for start in range(0, records.n, chunk):
        part = records.take(slice(start, start + chunk))
        # Overflow and 0/0 inside the model are expected for hostile β or σ: the mechanism
        # maps the resulting ±inf and NaN to bounded contributions.
        with np.errstate(all="ignore"):
            if in_start_round:
                gradients = model.start_statistics(part, sigma)
            else:
                gradients = model.gradients(beta, part, sigma)
        total = total + arithmetic.partial_sum(gradients)
    total = arithmetic.finish_sum(total, records.n, rng)
    if not np.all(np.isfinite(total)):  # only reachable without a bound (mechanism "none")
        raise ValueError(f"the sum of the gradients of {records.n} records overflows")
    return HolderReport(total=total, count=records.n)
