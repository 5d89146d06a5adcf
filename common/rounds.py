"""One data holder's round: gradients at β^t → mechanism → sum (DESIGN.md 2.3).

This is the single implementation used by the hospital agent and by the in-process
simulator. Records are processed in chunks so that memory stays bounded however many
records a holder has; the local noise of the whole sum is drawn once at the end.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ldpem.common._validation import check_count, check_positive
from ldpem.common.mechanisms import Mechanism
from ldpem.common.models import Model, Records

__all__ = ["DEFAULT_CHUNK", "HolderReport", "holder_round"]

#: Records per chunk: (chunk × d) float64 intermediates stay at a few MiB for d ≤ 50.
DEFAULT_CHUNK = 1 << 15


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
) -> HolderReport:
    """Privatized sum of the per-record gradients ∇q_i(β; β) of ``records`` at ``beta``.

    beta: (d,). Returns HolderReport(total (d,), count = records.n).
    """
    sigma = check_positive("sigma", sigma)
    chunk = check_count("chunk", chunk)
    beta = np.asarray(beta, dtype=np.float64)
    if beta.shape != (records.d,):
        raise ValueError(f"beta must have shape ({records.d},), got {beta.shape}")
    if not np.all(np.isfinite(beta)):
        raise ValueError("beta must be finite, got NaN or inf")
    total = np.zeros(records.d)
    for start in range(0, records.n, chunk):
        part = records.take(slice(start, start + chunk))
        gradients = model.gradients(beta, part, sigma)
        if not np.all(np.isfinite(gradients)):
            raise ValueError(
                f"gradients at records {start}..{start + part.n - 1} are not finite; "
                "check the data for NaN (outside RMC covariates) or overflowing values"
            )
        total += mechanism.contributions(gradients).sum(axis=0)
    total += mechanism.holder_noise(records.n, records.d, rng)
    return HolderReport(total=total, count=records.n)
