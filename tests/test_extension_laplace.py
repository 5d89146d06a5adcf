"""A mechanism whose noise is not a Gaussian, in one file, through ``ldpem simulate``
(docs/EXTENDING.md, issue 30 point 3).

``local-laplace`` clips each coordinate of a record's gradient to [−C, C] and adds Laplace
noise of scale b to each coordinate of its report: the L1 sensitivity is 2Cd, so one
report is (2Cd/b)-DP, pure ε (Dwork & Roth 2014, Theorem 3.6). It states that as its own
event (``LaplaceEvent``, a ``PureEvent``), calibrates its own noise (b = k·2Cd/ε for k
participations: pure ε composes by adding) and draws its own noise; the protocol and the
accountant take it without a product edit.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from ldpem.cli import main
from ldpem.common.accounting import event_epsilon
from ldpem.common.mechanisms import Mechanism, register_mechanism
from ldpem.common.mechanisms.base import FloatArray, Needs, NoiseSite, PrivacyBudget
from ldpem.common.privacy_events import (
    ComposedEvent,
    DpEvent,
    GaussianEvent,
    PureEvent,
    SelfComposedEvent,
)
from ldpem.common.protocol import make_mechanism, privacy_ratio


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

    def calibrated(self, d: int, budget: PrivacyBudget) -> Mechanism:
        # Pure ε composes by adding: each of k releases gets ε/k.
        scale = budget.participations * self.l1_sensitivity(d) / budget.epsilon
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


D = 3


def test_simulate_runs_it_with_its_own_calibration(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--mechanism", "local-laplace", "--clip", "1", "--n", "20000"]
    assert main([*argv, "--d", str(D), "--epsilon", "2", "--seed", "1", "--json"]) == 0
    outcome = json.loads(capsys.readouterr().out)
    # b = 2Cd/ε = 3 (each record reports once): σ = 3√2, not the Gaussian's σ_r.
    assert outcome["noise_std"] == pytest.approx(3.0 * math.sqrt(2.0), rel=1e-15)
    # 2,000 records a round, noise std 4.2 per coordinate: the average's noise is about
    # 0.1 per coordinate, so the estimate lands far below β = 0's error of 3.
    assert outcome["mechanism"] == "local-laplace" and outcome["error"] < 1.5


def test_its_event_is_what_the_accountant_composes() -> None:
    mechanism = make_mechanism(
        "local-laplace", d=D, records_per_round=100, epsilon=0.5, delta=1e-6, participations=4
    )
    event = SelfComposedEvent(mechanism.privacy_event(D), 4)
    assert event_epsilon(event, 1e-6) == pytest.approx(0.5, rel=1e-12)  # pure ε: 4 × ε/4
    # Composed with a Gaussian release: basic composition, the pure ε added.
    gaussian = GaussianEvent(1.0, 3.0)
    mixed = event_epsilon(ComposedEvent((event, gaussian)), 1e-6)
    assert mixed == pytest.approx(0.5 + event_epsilon(gaussian, 1e-6), rel=1e-12)


def test_the_agents_ledger_refuses_to_charge_it_as_a_gaussian() -> None:
    laplace = make_mechanism("local-laplace", d=D, records_per_round=100, epsilon=1.0, delta=1e-6)
    with pytest.raises(ValueError, match=r"ledger charges Gaussian privacy ratios.*LaplaceEvent"):
        privacy_ratio(laplace, D)
    gaussian = make_mechanism("local-clip", d=D, records_per_round=100, epsilon=1.0, delta=1e-6)
    assert privacy_ratio(gaussian, D) == gaussian.sensitivity(D) / gaussian.noise_std


def test_its_reports_carry_laplace_noise() -> None:
    mechanism = make_mechanism("local-laplace", d=D, records_per_round=100, epsilon=1.0, delta=1e-6)
    assert isinstance(mechanism, LocalLaplace)
    reports = mechanism.privatize(np.zeros((200_000, D)), np.random.default_rng(3))
    # E|X| is b for Laplace(b), and σ·√(2/π) = 2b/√π ≈ 1.128·b for a Gaussian of the same
    # std; the mean of 600,000 |X| has std b/√600,000 ≈ 0.0013·b: 0.01·b is 7.7 of them.
    b = mechanism.laplace_scale
    assert np.mean(np.abs(reports)) == pytest.approx(b, rel=0.01)
