"""What a holder's report declares and what it spends, one rule for agent and simulator."""

from __future__ import annotations

import math

from ldpem.common.core.privacy_events import GaussianEvent, NonPrivateEvent
from ldpem.common.mechanisms import Mechanism

__all__ = ["privacy_ratio", "report_noise_std"]


def report_noise_std(mechanism: Mechanism) -> float:
    """The noise std a holder's report declares under ``mechanism``: its σ_r when the
    report is private on its own, else 0 (the aggregator's noise, or a noise share that
    the coordinator never checks, docs/SECAGG.md): the agent's ``noise_std`` field and the
    simulator's."""
    return mechanism.noise_std if mechanism.locally_private() else 0.0


def privacy_ratio(mechanism: Mechanism, d: int) -> float:
    """μ = Δ/σ_r of one record in a holder's report under ``mechanism``, from its
    ``privacy_event`` (∞ when the report is not private on its own). The agent's ledger
    composes these Gaussian ratios: ValueError for a report whose event is of another
    kind (such a mechanism is for the simulator, ``federated = False``)."""
    if not mechanism.locally_private():
        return math.inf
    event = mechanism.privacy_event(d)
    if isinstance(event, NonPrivateEvent):
        return math.inf
    if not isinstance(event, GaussianEvent):
        raise ValueError(
            f"mechanism {mechanism.name}: the ledger charges Gaussian privacy ratios, and its "
            f"reports are a {type(event).__name__}"
        )
    return event.sensitivity / event.noise_std
