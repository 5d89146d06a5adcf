"""In-process gradient EM over simulated data holders (Algorithm 2 and its baselines).

Each round, every holder runs ``holder_round`` — the same function the hospital agent runs —
on its records for that round; the aggregator sums the reports, adds the central noise if
any, and takes the M-step β^{t+1} = β^t + η·(Σ totals / Σ counts + noise).

Records are either partitioned across rounds (Algorithm 2: each record reports once) or
reused every round (``reuse=True``: each record reports T times, its budget split).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from ldpem.common._validation import check_count, check_positive
from ldpem.common.mechanisms import Mechanism
from ldpem.common.models import Model, Records
from ldpem.common.rounds import holder_round

__all__ = ["EMResult", "round_groups", "run_gradient_em"]

FloatArray = NDArray[np.float64]


@dataclass
class EMResult:
    """Trajectory of a gradient EM run: betas (T+1, d) from β⁰ to β^T; errors after each
    round (T,) when β* is known."""

    betas: list[FloatArray] = field(default_factory=list)
    errors: list[float] = field(default_factory=list)

    @property
    def beta(self) -> FloatArray:
        return self.betas[-1]


def round_groups(
    records: Records, rounds: int, *, reuse: bool, rng: np.random.Generator
) -> list[Records]:
    """The records a holder uses in each round: T disjoint random groups, or all T times."""
    rounds = check_count("rounds", rounds)
    if reuse:
        return [records] * rounds
    if records.n < rounds:
        raise ValueError(f"a holder with {records.n} records cannot be split over {rounds} rounds")
    order = rng.permutation(records.n)
    return [records.take(np.sort(part)) for part in np.array_split(order, rounds)]


def run_gradient_em(
    *,
    model: Model,
    holders: Sequence[Records],
    sigma: float,
    mechanism: Mechanism,
    rounds: int,
    beta0: FloatArray,
    rng: np.random.Generator,
    eta: float = 1.0,
    reuse: bool = False,
    beta_star: FloatArray | None = None,
    on_round: Callable[[int, FloatArray], None] | None = None,
    holder_mechanisms: Sequence[Mechanism] | None = None,
) -> EMResult:
    """Run T rounds of (private) gradient EM over the ``holders``' records.

    beta0: (d,) starting point. ``on_round(t, beta)`` is called after each M-step (t = 1..T).
    ``holder_mechanisms``: one mechanism per holder when they differ (the ``hospital``
    mechanism's scale depends on the holder's size); ``mechanism`` then only supplies the
    aggregator's noise.
    """
    rounds = check_count("rounds", rounds)
    eta = check_positive("eta", eta)
    if not holders:
        raise ValueError("at least one data holder is needed")
    if holder_mechanisms is not None and len(holder_mechanisms) != len(holders):
        raise ValueError(
            f"holder_mechanisms must have one entry per holder ({len(holders)}), "
            f"got {len(holder_mechanisms)}"
        )
    mechanisms = list(holder_mechanisms) if holder_mechanisms else [mechanism] * len(holders)
    groups = [round_groups(records, rounds, reuse=reuse, rng=rng) for records in holders]
    beta = np.array(beta0, dtype=np.float64)
    result = EMResult(betas=[beta.copy()])
    for t in range(rounds):
        total = np.zeros_like(beta)
        count = 0
        for holder_groups, holder_mechanism in zip(groups, mechanisms, strict=True):
            report = holder_round(
                model=model,
                beta=beta,
                records=holder_groups[t],
                sigma=sigma,
                mechanism=holder_mechanism,
                rng=rng,
            )
            total += report.total
            count += report.count
        gradient = total / count + mechanism.aggregate_noise(beta.size, rng)
        beta = beta + eta * gradient
        result.betas.append(beta.copy())
        if beta_star is not None:
            result.errors.append(model.error(beta, beta_star))
        if on_round is not None:
            on_round(t + 1, beta)
    return result
