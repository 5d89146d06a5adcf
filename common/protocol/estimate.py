"""The reported estimate of a run: its last iterate, or an average of its last k iterates.

A run publishes ``final``: ``"last"`` (the default: the estimate is β^T) or
``"average:k"`` (1 ≤ k ≤ T). The average is post-processing of the released iterates and
of public noise levels, so it costs no privacy; the coordinator applies it when the run
finishes, and anyone holding the trajectory and the rounds' reports can recompute it
(``final_estimate``), as the simulator does.

The weights, precisely. Iterate β^t (t = T−k+1 … T) is the result of round t−1's M-step,
whose privacy noise has, per coordinate, the variance (``round_noise_variance``)

    v_{t−1} = Σ_h draws_h · σ_h² / C²  +  σ_c(C)²,

over the reports h of round t−1: C = Σ counts, σ_h the noise std the report declares,
draws_h = ``Mechanism.noise_draws(count_h)`` (the count for noise per record, 1 for noise
per holder, 0 otherwise), and σ_c(C) the coordinator's noise on the average of C records
(central mechanisms, ``CentralNoise.std``). The weight of β^t is (1/v_{t−1}) / Σ (1/v_{s−1})
over the k iterates; when any v is 0 (no privacy noise) the k weights are equal, 1/k. The
last step's noise stands in for the iterate's: near convergence it is the part of β^t's
noise that the next rounds have not yet contracted away.

For a model whose sign is not identifiable (``Model.sign_invariant``: β and −β are the
same fit) each averaged iterate is first multiplied by the sign of its inner product with
β^T (+1 when it is 0), so that iterates near −β^T do not cancel β^T. The estimate is
Σ w_t·s_t·β^t, accumulated in the order t = T−k+1 … T.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpem.common.core._validation import check_count
from ldpem.common.mechanisms import Mechanism, get_mechanism
from ldpem.common.protocol.construction import CentralNoise
from ldpem.common.protocol.schedule import Schedule, is_equal

__all__ = [
    "LAST",
    "FinalEstimate",
    "check_final",
    "check_noise_shares",
    "final_estimate",
    "final_iterates",
    "round_noise_variance",
]

FloatArray = NDArray[np.float64]

#: The default reported estimate: the last iterate β^T.
LAST = "last"
_AVERAGE = "average:"


def final_iterates(final: str, rounds: int) -> int:
    """k, the iterates ``final`` averages in a run of ``rounds`` rounds (1 for ``last``);
    ValueError (one line) unless ``final`` is ``"last"`` or ``"average:k"`` with
    1 ≤ k ≤ rounds."""
    rounds = check_count("rounds", rounds)
    if final == LAST:
        return 1
    if not final.startswith(_AVERAGE) or not final[len(_AVERAGE) :].isdigit():
        raise ValueError(f"final must be {LAST!r} or 'average:K', got {final[:40]!r}")
    k = int(final[len(_AVERAGE) :])
    if not 1 <= k <= rounds:
        raise ValueError(f"final {final!r}: K must be in 1..{rounds} (the rounds)")
    return k


def check_final(final: str, rounds: int) -> None:
    """ValueError (one line) unless ``final`` is valid for ``rounds`` rounds."""
    final_iterates(final, rounds)


def check_noise_shares(mechanism: str, schedule: Schedule, final: str) -> None:
    """ValueError (one line) when ``mechanism``'s noise is shares (secure aggregation) and
    the run's schedule is not ``equal`` or its ``final`` not ``last``: the shares are
    calibrated, quantized and checked with the run's one scale, and the coordinator sees
    only their sum, so neither per-round scales nor the averaged estimate apply to them."""
    if get_mechanism(mechanism).noise_site != "shares":
        return
    if not is_equal(schedule) or final != LAST:
        raise ValueError(f"mechanism {mechanism} runs only with --schedule equal and --final last")


def round_noise_variance(
    mechanism: type[Mechanism] | Mechanism,
    counts: Sequence[int],
    noise_stds: Sequence[float],
    central: CentralNoise | None = None,
) -> float:
    """v, the per-coordinate variance of the privacy noise in one round's average
    gradient (module docstring).

    Parameters
    ----------
    mechanism : Mechanism class or instance
        The round's mechanism (its ``noise_draws``).
    counts : sequence of K int
        The round's reports' record counts.
    noise_stds : sequence of K float
        The noise std each report declares.
    central : CentralNoise, optional
        The aggregator's noise of the round (central mechanisms).

    Returns
    -------
    float
        v ≥ 0.
    """
    count = sum(int(c) for c in counts)
    check_count("count", count)
    spread = math.fsum(
        mechanism.noise_draws(int(c)) * float(s) ** 2
        for c, s in zip(counts, noise_stds, strict=True)
    )
    variance = spread / count**2
    if central is not None:
        variance += central.std(count) ** 2
    return variance


@dataclass(frozen=True)
class FinalEstimate:
    """The reported estimate β̂ (d,) and how it was made: the iterates averaged (their t),
    their weights (summing to 1) and signs (±1)."""

    beta: FloatArray
    iterates: tuple[int, ...]
    weights: tuple[float, ...]
    signs: tuple[float, ...]


def final_estimate(
    betas: ArrayLike, variances: Sequence[float], *, final: str, sign_invariant: bool
) -> FinalEstimate:
    """The reported estimate of a run with trajectory ``betas`` (module docstring).

    Parameters
    ----------
    betas : array-like of shape (T+1, d)
        β⁰ … β^T.
    variances : sequence of T float
        v_t of each round's noise (``round_noise_variance``), t = 0 … T−1.
    final : str
        ``"last"`` or ``"average:k"``.
    sign_invariant : bool
        Whether β and −β are the same fit (align signs to β^T).

    Returns
    -------
    FinalEstimate
        ``beta`` of shape (d,); for ``last``, β^T itself with weight 1.
    """
    trajectory = np.asarray(betas, dtype=np.float64)
    rounds = trajectory.shape[0] - 1
    if trajectory.ndim != 2 or rounds < 1:
        raise ValueError(f"betas must be a (T+1, d) array with T ≥ 1, got {trajectory.shape}")
    if len(variances) != rounds:
        raise ValueError(f"variances must have one entry per round ({rounds})")
    k = final_iterates(final, rounds)
    iterates = tuple(range(rounds - k + 1, rounds + 1))
    last = trajectory[rounds]
    noise = [float(variances[t - 1]) for t in iterates]
    if any(not (math.isfinite(v) and v > 0.0) for v in noise):
        weights = tuple(1.0 / k for _ in iterates)
    else:
        inverse = [1.0 / v for v in noise]
        total = math.fsum(inverse)
        weights = tuple(w / total for w in inverse)
    signs = tuple(
        -1.0 if sign_invariant and float(np.dot(trajectory[t], last)) < 0.0 else 1.0
        for t in iterates
    )
    if k == 1:
        return FinalEstimate(last.copy(), iterates, (1.0,), (1.0,))
    beta = np.zeros_like(last)
    with np.errstate(over="ignore", invalid="ignore"):
        for t, w, s in zip(iterates, weights, signs, strict=True):
            beta = beta + (w * s) * trajectory[t]
    return FinalEstimate(beta, iterates, weights, signs)
