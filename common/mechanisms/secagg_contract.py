"""What a mechanism with noise shares provides besides the contract of every mechanism
(docs/SECAGG.md; ``noise_site == "shares"``).

Each holder adds a share of the noise to its sum and only the sum of all holders' reports
is seen (secure aggregation). Such a mechanism is a ``SharedNoise``: it publishes t_min
and the honest holders whose shares make the noise (``honest_holders``), calibrates one
holder's share for the SUM (``shared_noise_std``), and sums a holder's records in its own
arithmetic, chunk by chunk (``empty_sum``, ``partial_sum``) and finished once
(``finish_sum``: the quantization and the share). Callers ask for this interface
(``isinstance``), never for a name; ``sum_arithmetic`` and ``honest_holders`` give every
other mechanism the plain float sum and a single holder.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ldpem.common.core.accounting import Budget
from ldpem.common.mechanisms.base import FloatArray, Mechanism, _as_gradients

__all__ = [
    "FloatSum",
    "SharedNoise",
    "SumArithmetic",
    "honest_holders",
    "noise_shares",
    "sum_arithmetic",
]


class SumArithmetic(Protocol):
    """How a holder's sum of contributions is accumulated chunk by chunk and finished."""

    def empty_sum(self, d: int) -> NDArray[Any]:
        """The sum of no contributions, shape (d,)."""
        ...

    def partial_sum(self, gradients: FloatArray) -> NDArray[Any]:
        """Σ of a chunk's contributions: (n, d) gradients → (d,)."""
        ...

    def finish_sum(self, total: NDArray[Any], count: int, rng: np.random.Generator) -> FloatArray:
        """What a holder sends for the sum ``total`` of ``count`` records, shape (d,)."""
        ...


@dataclass(frozen=True)
class FloatSum:
    """The float sum of ``mechanism``'s contributions, finished with its ``holder_noise``:
    the arithmetic of every mechanism without noise shares."""

    mechanism: Mechanism

    def empty_sum(self, d: int) -> NDArray[Any]:
        return np.zeros(d)

    def partial_sum(self, gradients: FloatArray) -> NDArray[Any]:
        total: FloatArray = self.mechanism.contributions(gradients).sum(axis=0)
        return total

    def finish_sum(self, total: NDArray[Any], count: int, rng: np.random.Generator) -> FloatArray:
        finished: FloatArray = total + self.mechanism.holder_noise(count, total.shape[0], rng)
        return finished


class SharedNoise(Mechanism):
    """A mechanism whose noise is shared among the holders (module docstring). A subclass
    declares the field ``t_min`` (the registry checks it) and implements the methods
    below; its ``calibrated`` noise is ``shared_noise_std``."""

    #: The honest holders whose shares together make the noise (≥ 1).
    t_min: int

    @property
    @abstractmethod
    def honest_holders(self) -> int:
        """The fewest holders' reports whose sum is private: a round with fewer reports is
        not released."""

    @property
    def noise_shares(self) -> int:
        """The honest shares a released sum holds at the least, which the noise is sized
        for: ``honest_holders`` unless some of those holders may collude with the
        coordinator (their shares then add nothing it cannot subtract)."""
        return self.honest_holders

    @abstractmethod
    def shared_noise_std(
        self, d: int, *, epsilon: float, delta: float, participations: int = 1
    ) -> float:
        """The std of one holder's share such that any ``honest_holders`` shares make each
        record (ε, δ)-DP over ``participations`` rounds, in dimension ``d``."""

    @abstractmethod
    def empty_sum(self, d: int) -> NDArray[Any]:
        """The sum of no contributions in this mechanism's arithmetic, shape (d,)."""

    @abstractmethod
    def partial_sum(self, gradients: FloatArray) -> NDArray[Any]:
        """Σ of a chunk's contributions in this mechanism's arithmetic: (n, d) → (d,)."""

    @abstractmethod
    def finish_sum(self, total: NDArray[Any], count: int, rng: np.random.Generator) -> FloatArray:
        """What a holder sends for the sum ``total`` (from ``partial_sum``) of ``count``
        records, shape (d,)."""

    def calibrated(self, d: int, budget: Budget, participations: int = 1) -> Mechanism:
        """The shares calibrated for the SUM (``shared_noise_std``); the budget's
        ``accounting`` is for Gaussian noise and does not apply."""
        b = budget
        noise = self.shared_noise_std(
            d, epsilon=b.epsilon, delta=b.delta, participations=participations
        )
        return self.with_noise(noise)

    def holder_sum(self, gradients: ArrayLike, rng: np.random.Generator) -> FloatArray:
        """What a holder sends for a batch, in this mechanism's arithmetic."""
        g = _as_gradients(gradients)
        return self.finish_sum(self.empty_sum(g.shape[1]) + self.partial_sum(g), g.shape[0], rng)


def sum_arithmetic(mechanism: Mechanism) -> SumArithmetic:
    """How a holder sums its records under ``mechanism``: its own arithmetic for noise
    shares, the float sum plus ``holder_noise`` otherwise."""
    return mechanism if isinstance(mechanism, SharedNoise) else FloatSum(mechanism)


def noise_shares(mechanism: Mechanism) -> int:
    """The honest noise draws a release under ``mechanism`` holds at the least: its
    ``noise_shares`` for noise shares, 1 otherwise."""
    return mechanism.noise_shares if isinstance(mechanism, SharedNoise) else 1


def honest_holders(mechanism: Mechanism) -> int:
    """The fewest holders' reports whose sum ``mechanism`` releases: its
    ``honest_holders`` for noise shares, 1 otherwise."""
    return mechanism.honest_holders if isinstance(mechanism, SharedNoise) else 1
