"""The wire's rules for a run of noise shares (secure aggregation, docs/SECAGG.md): what
its request must hold beyond the schema (``check_shares``, run by ``wire.RunCreate``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

from ldpem.common.mechanisms import get_mechanism

__all__ = ["SharesRequest", "check_shares"]


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class SharesRequest(Protocol):
    """What ``check_shares`` reads of a run request (``wire.RunCreate`` is one; declared
    here so that this module never imports the wire module that calls it)."""

    @property
    def mechanism(self) -> str: ...
    @property
    def t_min(self) -> int | None: ...
    @property
    def colluders(self) -> int | None: ...
    @property
    def roster(self) -> dict[str, Any] | None: ...
    @property
    def hospitals(self) -> Sequence[_Named]: ...


def check_shares(request: SharesRequest) -> None:
    """A run of noise shares needs a roster naming every hospital, K ≥ 2, t_min > K/2
    (``secagg.minimum_t_min``, at most K) and c < 2·t_min − K colluders; no other run takes
    a roster, a t_min or a c.
    ValueError otherwise."""
    shares = get_mechanism(request.mechanism).noise_site == "shares"
    if request.colluders is not None and not shares:
        raise ValueError(
            f"colluders is only meaningful for a mechanism whose noise is shared, not "
            f"{request.mechanism}"
        )
    if request.t_min is not None:
        if not shares:
            raise ValueError(
                f"t_min is only meaningful for a mechanism whose noise is shared, not "
                f"{request.mechanism}"
            )
        if request.t_min > len(request.hospitals):
            raise ValueError(
                f"t_min {request.t_min} exceeds the {len(request.hospitals)} enrolled hospitals"
            )
    if not shares:
        if request.roster is not None:
            raise ValueError(
                f"a roster is only meaningful for noise shares, not {request.mechanism}"
            )
        return
    from ldpem.common.secagg import Roster, RosterError, minimum_t_min

    k = len(request.hospitals)
    if k < 2:
        raise ValueError("a run of noise shares needs at least 2 hospitals")
    if request.roster is None:
        raise ValueError("a run of noise shares needs the consortium's roster")
    try:
        roster = Roster.from_json(json.dumps(request.roster))
    except RosterError as error:
        raise ValueError(f"roster: {error}") from None
    missing = [h.name for h in request.hospitals if h.name not in roster]
    if missing:
        raise ValueError(f"hospitals not on the roster: {', '.join(missing[:5])}")
    if request.t_min is not None and request.t_min < minimum_t_min(k):
        raise ValueError(
            f"t_min {request.t_min} must be more than half the {k} hospitals "
            f"(at least {minimum_t_min(k)}): secure aggregation needs an honest majority"
        )
    if request.colluders is not None:
        from ldpem.common.protocol import study_colluders, study_t_min

        t_min = max(study_t_min(request.t_min, k), minimum_t_min(k))
        study_colluders(request.colluders, k, t_min)  # ValueError: c ≥ 2·t_min − K
