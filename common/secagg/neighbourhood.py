"""A round's SecAgg+ neighbourhoods, as holder and aggregator both compute them from public
values (docs/SECAGG_GRAPH.md, "Integration"), and the holder's checks that change on the
graph: the survivor set's certificate and the release of a neighbour's seed share.

On the graph (``RoundParameters.graph``) every holder's masks and shares go only to its
neighbours in ``NeighbourGraph(roster names, k, graph_seed(run, round, roster digest))``
(the Harary graph: exactly k each) or, on the expander (``RoundParameters.expander``), in
``CycleGraph(roster names, k, seed)`` (the union of k/2 random cycles: at most k each,
repeats merged), and the survivor set S is certified by τ signatures of the public
committee (the first m of ``committee``). On the full mesh (k ≥ K − 1) ``round_graph`` is
None and nothing here changes the protocol of docs/SECAGG.md.
"""

from __future__ import annotations

from collections.abc import Collection

from ldpem.common.secagg import consistency, messages
from ldpem.common.secagg.errors import SecAggRefused
from ldpem.common.secagg.graph.cycles import CycleGraph
from ldpem.common.secagg.graph.harary import NeighbourGraph, committee, graph_seed
from ldpem.common.secagg.keys import Roster

__all__ = ["RoundGraph", "check_certificate", "round_graph"]


class RoundGraph:
    """The round's graph over the roster's holders and its committee.

    ``everyone``: the caller will ask for every holder's neighbours (the aggregator), so the
    expander's are read from its adjacency, built once (``CycleGraph.adjacency``), rather
    than evaluated holder by holder; a holder asks for its own only."""

    def __init__(
        self, roster: Roster, parameters: messages.RoundParameters, *, everyone: bool = False
    ) -> None:
        if len(roster) != parameters.k:
            raise SecAggRefused(
                f"on the graph the roster must hold exactly the K = {parameters.k} holders, "
                f"it has {len(roster)}"
            )
        seed = graph_seed(parameters.run_id, parameters.round, roster.digest)
        self.graph: NeighbourGraph | CycleGraph = (
            CycleGraph(roster.names, parameters.neighbours, seed)
            if parameters.expander
            else NeighbourGraph(roster.names, parameters.neighbours, seed)
        )
        self._everyone = everyone
        self.committee = committee(roster.names, parameters.committee, seed)
        self.threshold = parameters.committee_threshold
        self._neighbours: dict[str, frozenset[str]] = {}

    def neighbours(self, name: str) -> frozenset[str]:
        """``name``'s neighbours, computed once (the aggregator asks for each holder's at
        every step)."""
        found = self._neighbours.get(name)
        if found is None:
            if self._everyone and isinstance(self.graph, CycleGraph):
                found = self.graph.adjacency()[name]
            else:
                found = self.graph.neighbours(name)
            self._neighbours[name] = found
        return found


def round_graph(
    roster: Roster, parameters: messages.RoundParameters, *, everyone: bool = False
) -> RoundGraph | None:
    """The round's graph, or None on the full mesh (``everyone``: as in ``RoundGraph``)."""
    return RoundGraph(roster, parameters, everyone=everyone) if parameters.graph else None


def check_certificate(
    request: consistency.UnmaskRequest,
    graph: RoundGraph,
    *,
    own: str,
    masked_with: Collection[str],
    roster: Roster | None = None,
    t_min: int = 0,
) -> None:
    """SecAggRefused unless ``request`` (whose signatures ``consistency.check_signatures``
    verified, t_min = 0) certifies its S for holder ``own`` on the graph: at least τ
    signatures by committee members (two sets so certified share an honest signer, who
    signs one set per round: S is unique), and for every neighbour v whose seed share
    ``own`` would release (S ∩ what it masked with), either v's signature of S or v's
    masked-with attestation (``attestation.py``), valid under v's key in ``roster`` for
    this run and round, with which v could have signed S: at least t_k − 1 (``t_min`` − 1)
    of the neighbours it masked with in S, and none of S ∩ N(v) outside them
    (``consistency.check_signed_set``, the predicate v checks itself before it signs).
    Either proves docs/SECAGG_GRAPH.md's condition 2 for v; the attestation lets the round
    close without v's signature (v crashed, or restarted and lost its secrets). Without
    ``roster`` no attestation is accepted."""
    signers = {s.holder for s in request.signatures}
    members = len(signers & graph.committee)
    if members < graph.threshold:
        raise SecAggRefused(
            f"the unmasking request carries {members} committee signatures of its survivor "
            f"set, fewer than tau = {graph.threshold}"
        )
    released = (set(request.survivors) & set(masked_with)) - {own}
    attested = {a.holder: a for a in request.attestations}
    for unsigned in sorted(released - signers):
        attestation = attested.get(unsigned)
        if attestation is None or roster is None:
            raise SecAggRefused(
                f"the unmasking request carries no signature of {unsigned!r}, whose seed "
                f"share this holder would release, nor its masked-with attestation"
            )
        attestation.verify(roster, request.run_id, request.round)
        try:
            consistency.check_signed_set(
                request.survivors,
                own=unsigned,
                masked_with={*attestation.masked_with, unsigned},
                t_min=t_min,
                neighbours=graph.neighbours(unsigned),
            )
        except SecAggRefused as refusal:
            raise SecAggRefused(
                f"the masked-with attestation of {unsigned!r} does not allow the release of "
                f"its seed share: {refusal}"
            ) from None
