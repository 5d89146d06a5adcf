"""The aggregator's per-holder messages, which differ only on the SecAgg+ graph
(``neighbourhood.py``): each holder's participant list and unmasking request, and the
neighbourhoods they are cut to. On the full mesh every holder gets the same message."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from ldpem.common.secagg import messages
from ldpem.common.secagg.attestation import Attestation
from ldpem.common.secagg.neighbourhood import RoundGraph

__all__ = ["GraphRelay"]


class _Closing(Protocol):
    graph: RoundGraph | None
    advertisements: dict[str, messages.KeyAdvertisement]
    bundles: dict[str, messages.ShareBundle]
    signatures: dict[str, messages.SurvivorSignature]
    masked_inputs: dict[str, messages.MaskedInput]
    _request_sets: tuple[frozenset[str], frozenset[str]]

    def participants(self) -> messages.ParticipantList: ...
    def unmask_request(self) -> messages.UnmaskRequest: ...
    def _around(self, name: str) -> frozenset[str]: ...
    def _masked_with(self, holder: str) -> frozenset[str]: ...
    def _attestation(self, holder: str) -> Attestation: ...


class GraphRelay:
    """What ``Aggregator`` hands each holder, cut to its neighbourhood on the graph."""

    graph: RoundGraph | None
    advertisements: dict[str, messages.KeyAdvertisement]
    bundles: dict[str, messages.ShareBundle]
    masked_inputs: dict[str, messages.MaskedInput]
    #: ``_masked_with`` per holder, once computed.
    _peers: dict[str, frozenset[str]]
    #: The unmasking request's dropped holders and survivors, as sets (``_owed``).
    _request_sets: tuple[frozenset[str], frozenset[str]]

    def participant_lists(self: _Closing) -> dict[str, messages.ParticipantList]:
        """Close step 1 (``participants``): each participant's list, on the graph only its
        neighbours' advertisements and its own."""
        everyone = self.participants()
        return {
            name: messages.ParticipantList(
                everyone.run_id,
                everyone.round,
                tuple(
                    self.advertisements[n]
                    for n in sorted(self._around(name))
                    if n in self.advertisements
                ),
            )
            for name in sorted(self.advertisements)
        }

    def _around(self, name: str) -> frozenset[str]:
        """``name`` and its neighbours (every participant on the full mesh)."""
        if self.graph is None:
            return frozenset(self.advertisements)
        return self.graph.neighbours(name) | {name}

    def _others(self, holder: str, present: Mapping[str, object]) -> set[str]:
        """The members of ``present`` (participants) that ``holder`` relates to: its
        neighbours on the graph, every other one on the full mesh. O(k) on the graph,
        where ``present & _around(holder)`` built a set of all K participants."""
        if self.graph is None:
            return set(present) - {holder}
        return {peer for peer in self.graph.neighbours(holder) if peer in present}

    def _owed(self: _Closing, responder: str) -> tuple[set[str], set[str]]:
        """What the unmasking request asks of ``responder``: shares of the self-mask seeds
        of the survivors among itself and the peers it masked with, and of the masking keys
        of the dropped ones among those peers. O(k): the request's sets are built once."""
        peers = self._masked_with(responder)
        dropped, survivors = self._request_sets
        seeds = {peer for peer in (*peers, responder) if peer in survivors}
        return seeds, {peer for peer in peers if peer in dropped}

    def unmask_requests(self: _Closing) -> dict[str, messages.UnmaskRequest]:
        """Close step 4 (``unmask_request``): each signer's request. On the graph only the
        signatures of the signer's masking neighbours and of τ committee members (the
        fewest that certify S, those neighbours counted) go with it, the masked-with
        attestations of its masking neighbours in S that did not sign (none in a round
        where every survivor signed), and only its neighbours are named as dropped, so that
        it stays O(k + τ) long but S's bitmap."""
        request = self.unmask_request()
        if self.graph is None:
            return dict.fromkeys(sorted(self.signatures), request)
        by_signer = {s.holder: s for s in request.signatures}
        committee = sorted(self.graph.committee & by_signer.keys())
        _, survivors = self._request_sets
        out = {}
        for name in sorted(self.signatures):
            masked_with = self._masked_with(name)
            masking = masked_with & by_signer.keys()
            certifying = len(masking.intersection(committee))
            more = [n for n in committee if n not in masking]
            wanted = masking.union(more[: max(self.graph.threshold - certifying, 0)])
            # Survivors it masked with that did not sign: their attestations instead.
            unsigned = sorted((masked_with & survivors) - by_signer.keys() - {name})
            out[name] = messages.UnmaskRequest(
                request.run_id,
                request.round,
                request.survivors,
                tuple(n for n in request.dropped if n in self.bundles[name].ciphertexts),
                tuple(by_signer[n] for n in sorted(wanted)),
                request.order,
                tuple(self._attestation(n) for n in unsigned),
            )
        return out

    def _attestation(self: _Closing, holder: str) -> Attestation:
        """``holder``'s masked-with attestation, as its masked input carried it (checked on
        receipt), with the set it covers."""
        return Attestation(
            holder,
            tuple(sorted(self._masked_with(holder))),
            self.masked_inputs[holder].attestation,
        )

    def _masked_with(self, holder: str) -> frozenset[str]:
        """The peers a survivor ``holder`` masked with: the senders of its bundle less the
        ones it excluded (on the full mesh every other holder that shared keys).

        Cached: both are fixed once they exist (the bundles are cut from the share step's
        messages, closed before any bundle is made; a second, different masked input is
        refused), and the closing steps ask it for every pair of holders they relate
        (O(K²) lookups at K = 1000, each a set of k names when rebuilt)."""
        peers = self._peers.get(holder)
        if peers is None:
            bundle, masked = self.bundles[holder], self.masked_inputs[holder]
            peers = frozenset(bundle.ciphertexts).difference(masked.excluded)
            self._peers[holder] = peers
        return peers
