"""What a hospital's own command line fixes for its agent (``ldpem client``): the
coordinator, its records, its state, its budget, its model, and how it waits. A module of
its own, light to import, so that the command's parser reads the defaults from it
(``ldpem.options.field_defaults``) without importing the agent."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ldpem.client.ledger import DEFAULT_DATASET
from ldpem.client.retry import GIVE_UP
from ldpem.common.core.accounting import DEFAULT_ACCOUNTING

if TYPE_CHECKING:
    from ldpem.client.secagg import SecAggConfig

__all__ = ["AgentConfig"]


@dataclass(frozen=True)
class AgentConfig:
    coordinator: str
    token: str
    data: Path
    state: Path
    #: This hospital's own lifetime budget per record; never taken from the coordinator.
    epsilon: float
    delta: float
    #: The model this hospital's records are for (gmm, mrm, rmc): the agent's own choice,
    #: never the coordinator's; a run of another model is refused.
    model: str
    accounting: str = DEFAULT_ACCOUNTING
    allow_weaker: bool = False
    give_up: float = GIVE_UP
    wait: float = 30.0
    #: CA certificate (PEM) to verify the coordinator's TLS certificate; default: system CAs.
    ca_cert: Path | None = None
    #: Research only: reproducible partition AND noise. Voids the privacy guarantee.
    seed: int | None = None
    #: The population the budget belongs to (docs/PRIVACY.md); one budget per state directory
    #: unless another, disjoint population is declared.
    dataset: str = DEFAULT_DATASET
    #: Secure aggregation: signing key, roster and --min-honest (runs of noise shares).
    secagg: SecAggConfig | None = None
    #: The model's declared options this hospital consents to (--components), as (name,
    #: value) pairs; the others at the model's defaults. Pinned like the model: a run
    #: publishing other values is refused.
    model_options: tuple[tuple[str, int], ...] = ()
