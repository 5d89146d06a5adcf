"""The ledger states what a record spent as privacy events and asks the accountant
(``Ledger.spent_event``, ``event_epsilon``): each run's costliest round, composed."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ldpem.client.ledger import Ledger
from ldpem.common.core.accounting import epsilon_for_ratio, event_epsilon
from ldpem.common.core.privacy_events import (
    ComposedEvent,
    GaussianEvent,
    NonPrivateEvent,
    RatioEvent,
)
from tests.client.test_ledger import entry


def charge(ledger: Ledger, run: str, t: int, mu: float) -> None:
    ledger.reserve(entry(run, t, mu), budget=None, delta=1e-5, accounting="exact")


def test_each_runs_costliest_round_is_one_event(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    for run, t, mu in [("r1", 0, 0.2), ("r1", 1, 0.5), ("r2", 0, 0.3)]:
        charge(ledger, run, t, mu)
    assert ledger.spent_event("default") == ComposedEvent((RatioEvent(0.5), RatioEvent(0.3)))
    extra = ledger.spent_event("default", extra=("r3", 0.1))
    assert extra == ComposedEvent((RatioEvent(0.5), RatioEvent(0.3), RatioEvent(0.1)))
    assert ledger.spent_event("other") == ComposedEvent(())


@pytest.mark.parametrize("accounting", ["exact", "paper"])
def test_the_spent_epsilon_is_the_accountants_of_the_events(
    tmp_path: Path, accounting: str
) -> None:
    ledger = Ledger(tmp_path)
    charge(ledger, "r1", 0, 0.4)
    charge(ledger, "r2", 0, 0.7)
    spent = ledger.spent_epsilon(delta=1e-6, accounting=accounting)
    assert spent == event_epsilon(ledger.spent_event("default"), 1e-6, accounting)
    # μ composes in μ²: the same ε as one release of μ = √(0.4² + 0.7²).
    assert spent == epsilon_for_ratio(math.sqrt(0.4 * 0.4 + 0.7 * 0.7), 1e-6, accounting)
    assert ledger.spent_epsilon("other", delta=1e-6, accounting=accounting) == 0.0


def test_a_round_without_privacy_is_a_non_private_event(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    charge(ledger, "r1", 0, math.inf)
    assert ledger.spent_event("default") == ComposedEvent((NonPrivateEvent(),))
    assert ledger.spent_epsilon(delta=1e-5, accounting="exact") == math.inf


def test_a_ratio_event_composes_as_the_gaussian_release_of_its_ratio() -> None:
    gaussian = event_epsilon(GaussianEvent(0.75, 1.5), 1e-5)
    assert event_epsilon(RatioEvent(0.5), 1e-5) == pytest.approx(gaussian, rel=1e-12)
    with pytest.raises(ValueError, match="ratio must be a finite number >= 0"):
        RatioEvent(-1.0)
