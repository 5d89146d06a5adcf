"""A mechanism whose noise is not a Gaussian, in one file (docs/EXTENDING.md): each
coordinate clipped to [−C, C], Laplace noise of scale b on each coordinate of a record's
report. The L1 sensitivity is 2Cd, so one report is (2Cd/b)-DP, pure ε (Dwork & Roth 2014,
Theorem 3.6): the mechanism states that as its own event (``LaplaceEvent``, a
``PureEvent``), calibrates its own noise (b = k·2Cd/ε for k participations: pure ε
composes by adding) and draws its own noise. Loaded through ``LDPEM_PLUGINS`` by
tests/test_extension_laplace.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ldpem.common.core.accounting import Budget
from ldpem.common.core.privacy_events import DpEvent, PureEvent
from ldpem.common.mechanisms import Mechanism, register_mechanism
from ldpem.common.mechanisms.base import FloatArray, Needs, NoiseSite


@dataclass(frozen=True)
class LaplaceEvent(PureEvent):
    """One release of a query of L1 sensitivity Δ₁ plus Laplace(b) noise per coordinate."""

    l1_sensitivity: float
    scale: float

    @property
    def epsilon(self) -> float:
        return self.l1_sensitivity / self.scale


@register_mechanism
@dataclass(frozen=True, kw_only=True)
class LocalLaplace(Mechanism):
    """Coordinates clipped to [−C, C], Laplace noise of std σ = √2·b on each report."""

    name: ClassVar[str] = "local-laplace"
    label: ClassVar[str] = "local DP, Laplace noise"
    noise_site: ClassVar[NoiseSite] = "record"
    needs: ClassVar[Needs] = "clip"
    #: The agent's ledger charges Gaussian ratios: a simulator-only mechanism.
    federated: ClassVar[bool] = False

    clip: float
    noise_std: float

    @property
    def laplace_scale(self) -> float:
        """b = σ/√2."""
        return self.noise_std / math.sqrt(2.0)

    def contributions(self, gradients: FloatArray) -> FloatArray:
        clipped: FloatArray = np.clip(np.nan_to_num(gradients, nan=0.0), -self.clip, self.clip)
        return clipped

    def record_bound(self, d: int) -> float:
        return self.clip

    def sensitivity(self, d: int) -> float:
        return 2.0 * self.clip * math.sqrt(d)

    def l1_sensitivity(self, d: int) -> float:
        return 2.0 * self.clip * d

    def calibrated(self, d: int, budget: Budget, participations: int = 1) -> Mechanism:
        # Pure ε composes by adding: each of k releases gets ε/k.
        scale = participations * self.l1_sensitivity(d) / budget.epsilon
        return self.with_noise(math.sqrt(2.0) * scale)

    def privacy_event(self, d: int) -> DpEvent:
        return LaplaceEvent(self.l1_sensitivity(d), self.laplace_scale)

    def record_noise(self, shape: tuple[int, ...], rng: np.random.Generator) -> FloatArray:
        noise: FloatArray = rng.laplace(0.0, self.laplace_scale, shape)
        return noise

    def holder_noise(self, count: int, d: int, rng: np.random.Generator) -> FloatArray:
        # The sum of one independent Laplace draw per record: as private as the reports.
        if count == 0 or self.noise_std == 0.0:
            return np.zeros(d)
        noise: FloatArray = rng.laplace(0.0, self.laplace_scale, (count, d)).sum(axis=0)
        return noise
