"""Distributed DP over secure aggregation (docs/SECAGG.md): every holder truncates at the
run's common central scale, quantizes its sum and adds a Skellam share of the noise; the
aggregator only ever sees the sum of all holders' reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpem.common.core._validation import check_count
from ldpem.common.core.privacy_events import AccountedEvent, DpEvent
from ldpem.common.core.secagg_accounting import fallback_epsilon, share_noise_std, skellam_epsilon
from ldpem.common.core.secagg_noise import skellam_noise
from ldpem.common.core.secagg_quantize import (
    EXACT_LIMIT,
    IntegerSensitivity,
    dequantize,
    fine_sum,
    grid_step,
    integer_sensitivity,
    quantize_rows,
    round_fine,
)
from ldpem.common.mechanisms.base import FloatArray, NoiseSite, ScaleRule, _as_gradients
from ldpem.common.mechanisms.local import LocalTruncation
from ldpem.common.mechanisms.registry import register_mechanism
from ldpem.common.mechanisms.secagg_contract import SharedNoise

__all__ = ["SecAggSkellam", "SkellamEvent"]


@dataclass(frozen=True)
class SkellamEvent(AccountedEvent):
    """One release of a sum with integer sensitivity ``sensitivity`` (grid units) plus
    Sk(``mean``) noise per coordinate, accounted by ``skellam_epsilon``."""

    mean: float
    sensitivity: IntegerSensitivity

    def epsilon(self, delta: float, count: int) -> float:
        return skellam_epsilon(
            self.mean, delta=delta, sensitivity=self.sensitivity, participations=count
        )


@register_mechanism
@dataclass(frozen=True, kw_only=True)
class SecAggSkellam(LocalTruncation, SharedNoise):
    """Distributed DP with Skellam noise shares (docs/SECAGG.md).

    Each record is truncated as in the central model of Algorithm 2 (the scale s from the
    round's total count m: the same s at every holder). A holder sums its contributions
    exactly on a fine grid, rounds the sum once to the grid γ = 2^-j
    (``ldpem.common.core.secagg_quantize``), adds its share Sk(λ_s) of integer noise and sends
    γ·(Q + Z): an exact float, so the aggregate of the simulator (``math.fsum``) equals the
    unmasked integer sum times γ of a federated run, bit for bit. A round releases a sum of
    at least ``t_min`` holders, of whom up to ``colluders`` = c may collude with the
    coordinator (their shares add nothing); the t_min − c honest shares add up to
    Sk((t_min − c)·λ_s), calibrated so that the round's SUM is (ε, δ)-DP for each record
    (``ldpem.common.core.secagg_accounting``; docs/SECAGG.md, "The threat model").

    Parameters
    ----------
    scale : float
        s > 0, the truncation scale.
    smoothing : float
        β_s > 0.
    noise_std : float
        σ_s ≥ 0, the std of ONE holder's share in the contributions' units: γ·√(2λ_s).
    t_min : int
        The fewest holders whose reports make a round's sum (≥ 1).
    colluders : int
        c, 0 ≤ c < t_min: the most of them that may collude with the coordinator; the noise
        is sized for the t_min − c honest shares (``noise_shares``).
    """

    name = "secagg"
    label = "distributed DP (secure aggregation)"
    noise_site: ClassVar[NoiseSite] = "shares"
    scale_rule: ClassVar[ScaleRule | None] = "square-root"
    #: Federated runs mask every report (server/secagg*.py, client/secagg.py): the
    #: coordinator only ever sees the sum.
    federated = True

    t_min: int
    colluders: int = 0
    #: γ, the grid of the quantized sums: from the public record bound alone.
    grid: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "t_min", check_count("t_min", self.t_min))
        object.__setattr__(self, "colluders", check_count("colluders", self.colluders, minimum=0))
        if self.colluders >= self.t_min:
            raise ValueError(f"colluders must be below t_min = {self.t_min}, got {self.colluders}")
        object.__setattr__(self, "grid", grid_step(self.record_bound(1)))

    @property
    def honest_holders(self) -> int:
        """The fewest reports a round's sum holds (t_min): fewer are not released."""
        return self.t_min

    @property
    def noise_shares(self) -> int:
        """t_min − c: the honest shares a released sum holds at the least, whatever c
        colluders the coordinator picks among its t_min survivors."""
        return self.t_min - self.colluders

    @property
    def share_mean(self) -> float:
        """λ_s of one holder's share Sk(λ_s): (σ_s/γ)²/2 (0: no noise)."""
        return (self.noise_std / self.grid) ** 2 / 2.0

    def integer_sensitivity(self, d: int) -> IntegerSensitivity:
        """Δ∞ (and Δ₁, Δ₂) of a holder's quantized sum, in grid units, with the rounding
        slack (``quantize.integer_sensitivity``)."""
        return integer_sensitivity(self.record_bound(d), self.grid, d)

    def sensitivity(self, d: int) -> float:
        # What one record can move the released sum by, in L2: γ·√d·Δ∞ ≥ 2B√d, the rounding
        # slack included (the audit compares the noise with a σ for this distance).
        return self.grid * self.integer_sensitivity(d).l2

    def shared_noise_std(
        self, d: int, *, epsilon: float, delta: float, participations: int = 1
    ) -> float:
        return share_noise_std(
            epsilon=epsilon,
            delta=delta,
            sensitivity=self.integer_sensitivity(d),
            grid=self.grid,
            t_min=self.noise_shares,
            participations=participations,
        )

    def privacy_event(self, d: int) -> DpEvent:
        """The round's SUM with only its ``noise_shares`` = t_min − c honest shares (the
        fewest the coordinator can be made to include): a ``SkellamEvent``."""
        mean = self.noise_shares * self.share_mean
        return SkellamEvent(mean, self.integer_sensitivity(d))

    def epsilon(self, d: int, *, delta: float, honest: int, participations: int = 1) -> float:
        """ε at ``delta`` of a round's sum holding ``honest`` honest holders' shares."""
        honest = check_count("honest", honest)
        return skellam_epsilon(
            honest * self.share_mean,
            delta=delta,
            sensitivity=self.integer_sensitivity(d),
            participations=participations,
        )

    def fallback_epsilon(self, d: int, *, delta: float, participations: int = 1) -> float:
        """ε at ``delta`` of this holder's own report alone: what protects its records if
        every other holder colludes with the coordinator (docs/SECAGG.md, "Fallback")."""
        return fallback_epsilon(
            self.share_mean,
            delta=delta,
            sensitivity=self.integer_sensitivity(d),
            participations=participations,
        )

    def _share(self, d: int, rng: np.random.Generator) -> NDArray[np.int64]:
        """One holder's share Sk(λ_s), shape (d,) (zeros without noise)."""
        if self.noise_std == 0.0:
            return np.zeros(d, dtype=np.int64)
        return skellam_noise(self.share_mean, d, rng)

    def holder_noise(self, count: int, d: int, rng: np.random.Generator) -> FloatArray:
        """γ·Sk(λ_s), one share whatever ``count``; a holder's report adds it to its
        QUANTIZED sum (``finish_sum``), never to a float sum."""
        noise: FloatArray = self._share(d, rng).astype(np.float64) * self.grid
        return noise

    def empty_sum(self, d: int) -> NDArray[Any]:
        return np.zeros(d, dtype=np.int64).astype(object)

    def partial_sum(self, gradients: FloatArray) -> NDArray[Any]:
        # The exact sum on the fine grid (Python ints): the rounding of the whole sum is
        # left to finish_sum, so it happens once, whatever the chunks.
        return fine_sum(
            self.contributions(gradients),
            bound=self.record_bound(gradients.shape[1]),
            grid=self.grid,
        )

    def finish_sum(self, total: NDArray[Any], count: int, rng: np.random.Generator) -> FloatArray:
        """γ·(Q + Z): the fine sum rounded to the grid, plus this holder's share."""
        quantized = round_fine(total)
        return dequantize(quantized + self._share(len(quantized), rng).astype(object), self.grid)

    def privatize(self, gradients: ArrayLike, rng: np.random.Generator) -> FloatArray:
        """For each record alone: what a round releases when that record is the only one
        and t_min − c honest holders add their shares, γ·(Q(c_i) + Σ of t_min − c shares),
        (n, d): the smallest release the guarantee covers, for the privacy audit."""
        g = _as_gradients(gradients)
        integers = quantize_rows(
            self.contributions(g), bound=self.record_bound(g.shape[1]), grid=self.grid
        )
        if self.noise_std > 0.0:
            for _ in range(self.noise_shares):
                integers += skellam_noise(self.share_mean, g.shape, rng)
        if np.any(np.abs(integers) >= EXACT_LIMIT):
            raise ValueError("a release is not exact in float64 (|q| >= 2^53)")
        release: FloatArray = integers.astype(np.float64) * self.grid
        return release
