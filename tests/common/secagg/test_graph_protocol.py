"""SecAgg+ in the library (docs/SECAGG_GRAPH.md, "Integration"): masks and shares only
along the round's public graph, S certified by the committee, each holder answering for
its neighbourhood only."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ldpem.common.secagg import Aggregator, RoundParameters, SecAggRefused
from ldpem.common.secagg.consistency import UnmaskRequest
from ldpem.common.secagg.messages import ConsistencyCheck, ParticipantList
from tests.common.secagg.kit import RUN, Consortium, run_round, to_bundles, wire

K = 16


def graph_parameters(round_: int = 0) -> RoundParameters:
    """k = 6 neighbours, t_k = 4, committee (m, τ) = (7, 5), h = 2."""
    return RoundParameters(
        RUN, round_, K, 4, 32, 1, neighbours=6, committee=7, committee_threshold=5, honest=2
    )


@pytest.fixture(scope="module")
def consortium() -> Consortium:
    return Consortium.of(K)


def test_a_graph_round_sums_the_survivors_and_touches_neighbours_only(
    consortium: Consortium,
) -> None:
    done = run_round(consortium, graph_parameters(), dropped=["h03", "h11"])
    assert done.result == done.expected()
    assert set(done.request.survivors) == set(consortium.names) - {"h03", "h11"}
    graph = done.aggregator.graph
    assert graph is not None
    for name, bundle in done.bundles.items():
        assert set(bundle.ciphertexts) == graph.neighbours(name)  # k = 6, not K - 1 = 15
        assert len(bundle.ciphertexts) == 6


def test_garbage_from_a_neighbour_drops_it_and_the_round_goes_on(consortium: Consortium) -> None:
    graph = Aggregator(consortium.roster, graph_parameters(), dimension=1).graph
    assert graph is not None
    victim = sorted(graph.neighbours("h00"))[0]
    done = run_round(consortium, graph_parameters(), garbage=[("h00", victim)])
    assert done.holders[victim].excluded == {"h00"}
    assert "h00" not in done.request.survivors and victim in done.request.survivors
    assert done.result == done.expected()


def test_a_participant_list_with_a_non_neighbour_is_refused(consortium: Consortium) -> None:
    parameters = graph_parameters()
    holders = consortium.holders(parameters)
    aggregator = Aggregator(consortium.roster, parameters, dimension=1)
    for holder in holders.values():
        aggregator.receive_advertisement(holder.advertise())
    everyone = aggregator.participants()  # the full mesh's list, shown to one holder
    with pytest.raises(SecAggRefused, match="not a neighbour"):
        holders["h00"].share_keys(wire(everyone))


def _to_unmasking(consortium: Consortium) -> tuple[dict, Aggregator, dict]:  # type: ignore[type-arg]
    """A graph round up to its (honest) unmasking requests."""
    parameters = graph_parameters()
    shared = to_bundles(consortium, parameters)
    holders, aggregator = shared.holders, shared.aggregator
    for name, holder in holders.items():
        aggregator.receive_masked_input(
            holder.masked_input(shared.bundles[name], shared.inputs[name])
        )
    check = aggregator.consistency_check()
    for name in check.survivors:
        aggregator.receive_signature(holders[name].sign_survivors(check))
    return holders, aggregator, aggregator.unmask_requests()


def test_an_uncertified_survivor_set_is_refused(consortium: Consortium) -> None:
    holders, aggregator, requests = _to_unmasking(consortium)
    graph = aggregator.graph
    assert graph is not None
    name = sorted(set(consortium.names) - graph.committee)[0]
    request = requests[name]
    few = tuple(s for s in request.signatures if s.holder not in graph.committee or s.holder < "h0")
    members = [s for s in request.signatures if s.holder in graph.committee]
    short = replace(request, signatures=(*few, *members[: graph.threshold - 1]))
    short = replace(short, signatures=tuple(dict.fromkeys(short.signatures)))
    with pytest.raises(SecAggRefused, match="committee signatures"):
        holders[name].unmask(short)
    # and the holder's round is over: nothing is unmasked afterwards, even when certified
    with pytest.raises(SecAggRefused):
        holders[name].unmask(request)


def test_a_seed_share_is_not_released_without_the_neighbours_signature(
    consortium: Consortium,
) -> None:
    holders, aggregator, requests = _to_unmasking(consortium)
    graph = aggregator.graph
    assert graph is not None
    name = "h05"
    request = requests[name]
    neighbour = sorted(graph.neighbours(name) - graph.committee)[0]
    without = replace(
        request, signatures=tuple(s for s in request.signatures if s.holder != neighbour)
    )
    with pytest.raises(SecAggRefused, match=f"no signature of {neighbour!r}"):
        holders[name].unmask(without)


def test_the_isolation_attack_on_the_graph_is_refused(consortium: Consortium) -> None:
    """The aggregator shows a victim only t_k − 2 of its neighbours (a masking set it could
    fill with colluders), then a survivor set that drops the rest: refused at the bundle,
    and a neighbourhood of fewer than t_k survivors is refused at signing."""
    parameters = graph_parameters()
    holders = consortium.holders(parameters)
    aggregator = Aggregator(consortium.roster, parameters, dimension=1)
    for holder in holders.values():
        aggregator.receive_advertisement(holder.advertise())
    lists = aggregator.participant_lists()
    victim = "h07"
    for name, holder in holders.items():
        aggregator.receive_shares(holder.share_keys(lists[name]))
    bundle = aggregator.share_bundles()[victim]
    keep = sorted(bundle.ciphertexts)[: parameters.t_min - 2]
    small = replace(bundle, ciphertexts={n: bundle.ciphertexts[n] for n in keep})
    with pytest.raises(SecAggRefused, match="shared keys; t_min"):
        holders[victim].masked_input(wire(small), [1])
    # a victim that masked with t_k − 1 neighbours is asked to sign an S without them
    other = "h09"
    bundle = aggregator.share_bundles()[other]
    holders[other].masked_input(bundle, [1])
    graph = aggregator.graph
    assert graph is not None
    lonely = tuple(sorted(set(consortium.names) - graph.neighbours(other)))
    with pytest.raises(SecAggRefused, match="neighbourhood, fewer than t_min"):
        holders[other].sign_survivors(
            wire(ConsistencyCheck(RUN, 0, lonely, consortium.roster.names))
        )


def test_inconsistent_views_get_no_second_set_certified(consortium: Consortium) -> None:
    """Two survivor sets, S ∋ u and S' ∌ u, shown to different holders: an honest holder
    signs one set per round, so the committee certifies at most one (τ > m/2 and honest
    members sign once); a request over S' with S's signatures is refused."""
    holders, aggregator, requests = _to_unmasking(consortium)
    check = aggregator.consistency_check()
    graph = aggregator.graph
    assert graph is not None
    member = sorted(graph.committee & set(check.survivors))[0]
    other = tuple(n for n in check.survivors if n != sorted(set(check.survivors) - {member})[0])
    with pytest.raises(SecAggRefused, match="second, different"):
        holders[member].sign_survivors(ConsistencyCheck(RUN, 0, other))
    name = sorted(set(check.survivors) - {member})[1]
    forged = UnmaskRequest(RUN, 0, other, (), requests[name].signatures)
    with pytest.raises(SecAggRefused):
        holders[name].unmask(forged)


def test_graph_parameters_are_bound_in_the_advertisement(consortium: Consortium) -> None:
    holders = consortium.holders(graph_parameters())
    advert = wire(holders["h00"].advertise())
    assert advert.parameters == graph_parameters()
    mesh = Consortium.of(4)
    list_ = ParticipantList(RUN, 0, (advert,))
    assert wire(list_) == list_
    with pytest.raises(SecAggRefused, match="neighbours must be even"):
        replace(graph_parameters(), neighbours=5)
    with pytest.raises(SecAggRefused, match="committee"):
        replace(graph_parameters(), committee_threshold=3)
    with pytest.raises(SecAggRefused, match="honest must be"):
        replace(graph_parameters(), honest=4)
    assert mesh.parameters().to_dict().keys() == {
        "run_id",
        "round",
        "k",
        "t_min",
        "bits",
        "colluders",
    }


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"neighbours": 0, "committee": 7}, "need neighbours"),
        ({"neighbours": 15}, "neighbours must be even in"),  # K - 1: the mesh, not a graph
        ({"neighbours": 2, "t_min": 4}, r"t_k\) must be in \[2, k \+ 1 = 3\]"),
        ({"committee": 17}, "committee"),
        ({"committee_threshold": 8}, "tau must be at most m = 7"),
        ({"committee_threshold": 3}, "m/2 < tau"),
        ({"honest": 0}, "honest must be"),
        ({"colluders": 16}, "colluders must be"),
    ],
)
def test_graph_parameters_at_their_edges_are_refused(change: dict, match: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(SecAggRefused, match=match):
        replace(graph_parameters(), **change)


def test_a_peer_bound_to_another_graph_is_refused(consortium: Consortium) -> None:
    parameters = graph_parameters()
    holders = consortium.holders(parameters)
    other = Consortium(consortium.keys, consortium.roster).holders(replace(parameters, honest=3))
    aggregator = Aggregator(consortium.roster, parameters, dimension=1)
    for holder in holders.values():
        aggregator.receive_advertisement(holder.advertise())
    with pytest.raises(SecAggRefused, match="advertises"):
        aggregator.receive_advertisement(other["h01"].advertise())


def test_the_graph_needs_the_roster_of_exactly_k_holders() -> None:
    parameters = replace(graph_parameters(), k=15, committee=7)
    bigger = Consortium.of(K)
    with pytest.raises(SecAggRefused, match="exactly the K = 15 holders"):
        Aggregator(bigger.roster, parameters, dimension=1)


def test_a_holder_refuses_a_graph_run_promising_too_few_honest_shares(
    consortium: Consortium,
) -> None:
    with pytest.raises(SecAggRefused, match="h = 2 honest noise shares is below"):
        consortium.holders(graph_parameters(), min_honest=3)
