"""What the protocol reads from a run: plain read-only views, not the HTTP schemas.

The numerical core takes any object with these attributes; ``ldpem.common.wire``'s pydantic
models (``PublicParameters``, ``RunCreate``) have them, so the coordinator and the agent
pass their parsed messages as they are, and the core never imports pydantic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

__all__ = ["Enrolment", "PublicValues", "RunChoices", "RunRequest"]


class RunChoices(Protocol):
    """What a run request and the run's public parameters both state, with the same type."""

    @property
    def model(self) -> str: ...
    @property
    def model_options(self) -> Mapping[str, int]:
        """The model's declared options (``Model.options``) by name; empty: their defaults."""
        ...

    @property
    def d(self) -> int: ...
    @property
    def sigma(self) -> float: ...
    @property
    def rounds(self) -> int: ...
    @property
    def eta(self) -> float: ...
    @property
    def mechanism(self) -> str: ...
    @property
    def epsilon(self) -> float: ...
    @property
    def accounting(self) -> str: ...
    @property
    def zeta(self) -> float: ...
    @property
    def scale(self) -> float | None: ...
    @property
    def schedule(self) -> str | Sequence[float]: ...
    @property
    def final(self) -> str: ...
    @property
    def t_min(self) -> int | None: ...
    @property
    def colluders(self) -> int | None: ...


class PublicValues(RunChoices, Protocol):
    """A run's public parameters (``wire.PublicParameters``): the choices, resolved."""

    @property
    def delta(self) -> float: ...
    @property
    def tau(self) -> float: ...
    @property
    def smoothing(self) -> float | None: ...
    @property
    def clip(self) -> float | None: ...
    @property
    def records_per_round(self) -> int: ...
    @property
    def scales(self) -> Sequence[float] | None: ...
    @property
    def start(self) -> str: ...
    @property
    def honest_shares(self) -> int | None:
        """Noise shares: the honest shares the run's noise is sized for (t_min − c on the
        full mesh, h on the SecAgg+ graph); None for other mechanisms."""
        ...

    @property
    def survivors(self) -> int | None:
        """Noise shares on the expander: T, the fewest reports any sum the coordinator can
        learn holds (h of them honest, h > t_k); None on the mesh and the Harary graph."""
        ...


class Enrolment(Protocol):
    """One holder of a run request: its enrolled record count."""

    @property
    def records(self) -> int: ...


class RunRequest(RunChoices, Protocol):
    """What an operator asks for (``wire.RunCreate``), as far as the defaults need it."""

    @property
    def delta(self) -> float | None: ...
    @property
    def tau(self) -> float | None: ...
    @property
    def beta_bound(self) -> float | None: ...
    @property
    def snr(self) -> float: ...
    @property
    def clip(self) -> float: ...
    @property
    def hospitals(self) -> Sequence[Enrolment]: ...
    @property
    def beta0(self) -> Sequence[float] | None: ...
    @property
    def secagg_topology(self) -> str:
        """Noise shares: "mesh" (docs/SECAGG.md), "graph" or "expander"
        (docs/SECAGG_GRAPH.md), as resolved from "auto" (``runvalues.resolve_topology``)."""
        ...
