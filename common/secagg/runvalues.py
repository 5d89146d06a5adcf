"""The public values of a federated secagg run (docs/FEDERATED.md), derived once from
public values only, so that the coordinator and every agent compute the same numbers:

* K, the enrolled holders, and t_min (more than K/2: ``messages.minimum_t_min``);
* the modulus bits, from the most records a round can sum (m + K: Σ_k ⌈n_k/T⌉ ≤ m + K),
  the record bound, the grid γ and the share mean λ_s at the run's own budget;
* the roster digest (SHA-256 of its canonical JSON), pinned by every agent.

And the conversions between a holder's float report γ·(Q + Z) and the integers it masks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ldpem.common.core.secagg_quantize import modulus_bits
from ldpem.common.mechanisms import Mechanism, get_mechanism
from ldpem.common.protocol import holder_mechanism
from ldpem.common.protocol.parameters import PublicValues

__all__ = [
    "grid_of",
    "is_shared",
    "run_modulus_bits",
    "run_shares_mechanism",
    "shares_values",
    "signed_sum",
    "to_residues",
]


def is_shared(mechanism: str) -> bool:
    """Whether a run of ``mechanism`` sums noise shares through secure aggregation."""
    return get_mechanism(mechanism).noise_site == "shares"


def _grid_and_mean(mechanism: Mechanism) -> tuple[float, float]:
    grid = float(getattr(mechanism, "grid"))  # noqa: B009 - the shares' mechanism has one
    return grid, float(getattr(mechanism, "share_mean"))  # noqa: B009


def run_shares_mechanism(params: PublicValues) -> Mechanism:
    """The holders' mechanism at the run's own budget: the γ, record bound and share the
    run's modulus is sized for (every agent's share must be no larger)."""
    return holder_mechanism(
        params,
        records=params.records_per_round,
        epsilon=params.epsilon,
        delta=params.delta,
        accounting=params.accounting,
    )


def run_modulus_bits(params: PublicValues, holders: int) -> int:
    """The run's modulus bits: wide enough for a round's sum of ``holders`` holders' shares
    calibrated at the run's budget (``quantize.modulus_bits``)."""
    mechanism = run_shares_mechanism(params)
    grid, mean = _grid_and_mean(mechanism)
    return modulus_bits(
        records=params.records_per_round + holders,
        holders=holders,
        bound=mechanism.record_bound(params.d),
        grid=grid,
        share_mean=max(mean, 1e-300),
        d=params.d,
    )


def grid_of(mechanism: Mechanism) -> float:
    """γ of a shares' mechanism."""
    return _grid_and_mean(mechanism)[0]


def to_residues(total: Sequence[float], grid: float, bits: int) -> NDArray[np.uint64]:
    """A report γ·(Q + Z) as the integers Q + Z mod 2^bits (exact: γ is a power of two and
    |Q + Z| < 2^53). ValueError for a value off the grid."""
    out = np.empty(len(total), dtype=np.uint64)
    modulus = 1 << bits
    for i, value in enumerate(total):
        units = value / grid
        if not math.isfinite(units) or units != math.floor(units) or abs(units) >= 2.0**53:
            raise ValueError(f"coordinate {i} of the report is not on the grid {grid!r}")
        out[i] = int(units) % modulus
    return out


def signed_sum(residues: Sequence[int] | NDArray[np.uint64], bits: int) -> list[int]:
    """Σ mod 2^bits, centered to [−2^(bits−1), 2^(bits−1))."""
    half = 1 << (bits - 1)
    return [(int(v) + half) % (1 << bits) - half for v in residues]


def shares_values(params: Any, *, holders: int, roster_digest: str) -> dict[str, Any]:
    """The secagg fields of a run's public parameters."""
    return {
        "holders": holders,
        "modulus_bits": run_modulus_bits(params, holders),
        "roster_digest": roster_digest,
    }
