"""The wire's rules for a run of noise shares (secure aggregation, docs/SECAGG.md): what
its request must hold beyond the schema (``check_shares``, run by ``wire.RunCreate``), and
the published values of a run on the SecAgg+ graph (``SecAggGraph``, docs/SECAGG_GRAPH.md)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

from pydantic import Field, SerializerFunctionWrapHandler, ValidationInfo, model_serializer
from pydantic_core import PydanticCustomError

from ldpem.common.mechanisms import get_mechanism
from ldpem.common.wire.base import Schema

__all__ = [
    "SECAGG_ANSWER_HEADER",
    "SecAggGraph",
    "SharesRequest",
    "check_shares",
    "roster_inlined",
    "threshold_values",
    "topology_resolved",
]

#: On the 200 of a holder's secagg POST with ``then`` (the step's answer it waits for):
#: which answer the body is. Without it the body is {"status": "accepted"}, as from a
#: coordinator that does not know ``then`` (docs/FEDERATED.md).
SECAGG_ANSWER_HEADER = "Ldpem-Answer"


class SecAggGraph(Schema):
    """What a run on the SecAgg+ graph publishes beside K, t_min (= t_k) and c: its inputs,
    the dropout share δ and the least honest shares h asked for, and what
    ``runvalues.run_graph`` derives from K, c, δ and h at 2⁻⁴⁰: the degree k, the committee
    (m, τ) and h, the honest noise shares in any sum the coordinator can learn (the noise
    is sized for them); on the expander (``runvalues.run_expander``) also T, the survivor
    floor (``survivors``: 0 and left out of the JSON on the Harary graph, whose object is
    unchanged). Every agent recomputes them (``runvalues.graph_problem``)."""

    dropout_share: float = Field(ge=0, lt=1)
    min_honest_shares: int = Field(ge=2, le=1000)
    neighbours: int = Field(ge=2, le=1000)
    committee: int = Field(ge=1, le=1000)
    committee_threshold: int = Field(ge=1, le=1000)
    honest: int = Field(ge=1, le=1000)
    survivors: int = Field(default=0, ge=0, le=1000)

    @property
    def topology(self) -> str:
        """The run's topology: "expander" (a survivor floor T) or "graph" (Harary)."""
        return "expander" if self.survivors else "graph"

    @model_serializer(mode="wrap")
    def _harary_unchanged(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if not self.survivors:
            del data["survivors"]
        return data


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
    def secagg_topology(self) -> str: ...
    @property
    def dropout_share(self) -> float | None: ...
    @property
    def min_honest_shares(self) -> int | None: ...
    @property
    def hospitals(self) -> Sequence[_Named]: ...


def roster_inlined(cls: type, value: Any) -> Any:
    """RunCreate's roster before validation: a file name is refused (the coordinator never
    reads one)."""
    if isinstance(value, str):
        raise PydanticCustomError(
            "roster_file",
            "must be the roster's JSON object, not a file name: inline the content of "
            "roster.json, or let ldpem run create read it (--roster FILE, or a file name "
            "in the request file)",
        )
    return value


#: The request's fields ``runvalues.resolve_topology`` reads to resolve "auto".
_TOPOLOGY_INPUTS = frozenset(
    ("mechanism", "hospitals", "t_min", "colluders", "dropout_share", "min_honest_shares")
)


def topology_resolved(cls: type, value: str, info: ValidationInfo) -> str:
    """RunCreate's ``secagg_topology``: "auto" as ``runvalues.resolve_topology`` resolves it
    for the request (left as is when a field it reads is invalid: the request is refused
    for that field), any other value as it is."""
    data = info.data
    if value != "auto" or not set(data) >= _TOPOLOGY_INPUTS:
        return value
    from ldpem.common.secagg.runvalues import is_shared, resolve_topology

    resolved: str = resolve_topology(
        len(data["hospitals"]),
        data["colluders"],
        data["dropout_share"],
        data["min_honest_shares"],
        shares=is_shared(data["mechanism"]),
        t_min=data["t_min"],
    )
    return resolved


def check_shares(request: SharesRequest) -> None:
    """A run of noise shares needs a roster naming every hospital, K ≥ 2, t_min > K/2
    (``secagg.minimum_t_min``, at most K) and c < 2·t_min − K colluders; no other run takes
    a roster, a t_min or a c.
    ValueError otherwise."""
    shares = get_mechanism(request.mechanism).noise_site == "shares"
    topology = request.secagg_topology
    graph = topology in ("graph", "expander")
    if not graph and (request.dropout_share, request.min_honest_shares) != (None, None):
        raise ValueError(
            "dropout_share and min_honest_shares need secagg_topology graph or expander "
            f"(this run's is {topology})"
        )
    if graph and not shares:
        raise ValueError(
            f"secagg_topology {topology} is only meaningful for noise shares, not "
            f"{request.mechanism}"
        )
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
        raise ValueError(
            "a run of noise shares needs the consortium's roster: give it with ldpem run "
            'create --roster FILE (or "roster": "FILE" in the request; docs/SECAGG.md)'
        )
    try:
        roster = Roster.from_json(json.dumps(request.roster))
    except RosterError as error:
        raise ValueError(f"roster: {error}") from None
    missing = [h.name for h in request.hospitals if h.name not in roster]
    if missing:
        raise ValueError(f"hospitals not on the roster: {', '.join(missing[:5])}")
    if graph:
        _check_graph(request, sorted(roster.names))
        return
    if request.t_min is not None and request.t_min < minimum_t_min(k):
        raise ValueError(
            f"t_min {request.t_min} must be more than half the {k} hospitals "
            f"(at least {minimum_t_min(k)}): secure aggregation needs an honest majority"
        )
    if request.colluders is not None:
        from ldpem.common.protocol import study_colluders, study_t_min

        t_min = max(study_t_min(request.t_min, k), minimum_t_min(k))
        study_colluders(request.colluders, k, t_min)  # ValueError: c ≥ 2·t_min − K


def _graph(request: SharesRequest, k: int) -> tuple[Any, int, float, int]:
    """The graph of a graph or expander run's request (``runvalues.requested_graph``) with
    its c, δ and h, defaults filled in (c = ⌊K/3⌋, ``runvalues.DEFAULT_DROPOUT_SHARE``,
    ``DEFAULT_HONEST_SHARES``); ValueError (one line) for settings it cannot meet, on the
    expander naming the topology to use instead."""
    from ldpem.common.secagg.runvalues import requested_graph

    topology = request.secagg_topology
    try:
        return requested_graph(
            k,
            request.colluders,
            request.dropout_share,
            request.min_honest_shares,
            topology=topology,
        )
    except ValueError as error:
        if topology != "expander":
            raise
        reason = str(error).removesuffix(": use the mesh")
        raise ValueError(
            f"secagg_topology expander cannot be met: {reason}; use secagg_topology mesh "
            "(auto picks it)"
        ) from None


def threshold_values(request: SharesRequest, t_min: int) -> dict[str, Any]:
    """t_min, c and (on a graph) ``graph`` of a shares run, defaults filled in: on the
    mesh t_min (the study's ``t_min``, at least ``minimum_t_min``) and c (``study_colluders``);
    on the Harary graph or the expander t_min = t_k, c and ``SecAggGraph``'s fields
    (``runvalues.graph_values``)."""
    from ldpem.common.protocol import study_colluders
    from ldpem.common.secagg import minimum_t_min
    from ldpem.common.secagg.runvalues import graph_values

    k = len(request.hospitals)
    if request.secagg_topology in ("graph", "expander"):
        graph, colluders, dropout, honest = _graph(request, k)
        return {
            "t_min": graph.threshold,
            "colluders": colluders,
            "graph": graph_values(graph, dropout_share=dropout, honest=honest),
        }
    if request.t_min is None:
        t_min = max(t_min, minimum_t_min(k))
    return {"t_min": t_min, "colluders": study_colluders(request.colluders, k, t_min)}


def _check_graph(request: SharesRequest, roster: list[str]) -> None:
    """A graph or expander run: the graph is over the roster's names, so the roster holds
    exactly the enrolled hospitals; t_min is derived (t_k), never given; K, c, δ and h
    must give a graph sparser than the full mesh (``runvalues.requested_graph``)."""
    topology = request.secagg_topology
    names = sorted(h.name for h in request.hospitals)
    if roster != names:
        extra = sorted(set(roster) - set(names))
        raise ValueError(
            f"on the {topology} the roster must hold exactly the {len(names)} enrolled "
            f"hospitals; it also names {', '.join(extra[:5])}"
        )
    if request.t_min is not None:
        raise ValueError(f"t_min is derived on the {topology} (t_k); give dropout_share instead")
    graph, colluders, dropout, honest = _graph(request, len(names))
    if graph.full_mesh:
        raise ValueError(
            f"at K = {len(names)}, c = {colluders}, dropout_share {dropout} and "
            f"min_honest_shares {honest} the graph is the full mesh (k = K - 1): use "
            "secagg_topology mesh"
        )
