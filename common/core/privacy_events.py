"""The privacy of a mechanism as data (in the spirit of dp_accounting's ``DpEvent``).

A mechanism states what one of its releases costs a record as an *event*
(``Mechanism.privacy_event``); the accountant (``ldpem.common.core.accounting.event_epsilon``)
composes events into an ε at a δ. An event is a plain frozen value, so it can be
compared, logged and composed without knowing the mechanism that made it:

* ``GaussianEvent(sensitivity, noise_std)``: one release of a query of L2 sensitivity Δ
  with N(0, σ² I) noise (its noise multiplier σ/Δ), composed exactly as Gaussian DP
  (or as zCDP under the paper's accounting, docs/MATH.md section 4);
* ``RatioEvent(ratio)``: a Gaussian release known by its privacy ratio μ = Δ/σ alone
  (μ-GDP), as an agent's ledger keeps a round; it composes as a ``GaussianEvent``;
* ``PureEvent``: an ε-DP release (δ = 0), e.g. a Laplace mechanism; a subclass states
  its ``epsilon``; pure events compose by adding their ε;
* ``AccountedEvent``: a release with its own accountant (e.g. Skellam noise on an
  integer sum, ``ldpem.common.core.secagg_accounting``): a subclass gives the ε at δ of
  ``count`` self-compositions; it composes with nothing else;
* ``SelfComposedEvent(event, count)``, ``ComposedEvent(events)``: ``count`` repetitions
  of one event, and a sequence of events;
* ``NoOpEvent`` (nothing about the record is released) and ``NonPrivateEvent`` (ε = ∞).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

from ldpem.common.core._validation import check_count, check_positive

__all__ = [
    "AccountedEvent",
    "ComposedEvent",
    "DpEvent",
    "GaussianEvent",
    "NoOpEvent",
    "NonPrivateEvent",
    "PureEvent",
    "RatioEvent",
    "SelfComposedEvent",
]


class DpEvent:
    """What one release costs a record: the base of every event (module docstring)."""


@dataclass(frozen=True)
class NoOpEvent(DpEvent):
    """A release that tells nothing about the record (ε = 0)."""


@dataclass(frozen=True)
class NonPrivateEvent(DpEvent):
    """A release with no privacy guarantee (ε = ∞)."""


@dataclass(frozen=True)
class GaussianEvent(DpEvent):
    """One release of a query of L2 sensitivity Δ = ``sensitivity`` (≥ 0) plus
    N(0, σ² I), σ = ``noise_std`` > 0 per coordinate."""

    sensitivity: float
    noise_std: float

    def __post_init__(self) -> None:
        value = float(self.sensitivity)
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"sensitivity must be a finite number >= 0, got {value!r}")
        check_positive("noise_std", self.noise_std)

    @property
    def noise_multiplier(self) -> float:
        """σ/Δ (∞ for a query of sensitivity 0)."""
        return math.inf if self.sensitivity == 0 else self.noise_std / self.sensitivity


@dataclass(frozen=True)
class RatioEvent(DpEvent):
    """A Gaussian release known by its privacy ratio μ = Δ/σ = ``ratio`` (finite, ≥ 0)
    alone: μ-GDP, what a ledger keeps of a round (``ldpem.client.ledger``)."""

    ratio: float

    def __post_init__(self) -> None:
        value = float(self.ratio)
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"ratio must be a finite number >= 0, got {value!r}")


class PureEvent(DpEvent, ABC):
    """An ε-DP release (δ = 0): a subclass states its ``epsilon``."""

    @property
    @abstractmethod
    def epsilon(self) -> float:
        """ε ≥ 0 of one release."""


class AccountedEvent(DpEvent, ABC):
    """A release with its own accountant: a subclass gives the ε at δ of ``count``
    repetitions. The accountant composes it with nothing else (a ``ValueError``)."""

    @abstractmethod
    def epsilon(self, delta: float, count: int) -> float:
        """ε at ``delta`` of ``count`` ≥ 1 repetitions of this release."""


@dataclass(frozen=True)
class SelfComposedEvent(DpEvent):
    """``count`` ≥ 1 repetitions of ``event`` on the same record."""

    event: DpEvent
    count: int

    def __post_init__(self) -> None:
        check_count("count", self.count)


@dataclass(frozen=True)
class ComposedEvent(DpEvent):
    """The releases of ``events``, one after another, on the same record."""

    events: tuple[DpEvent, ...]
