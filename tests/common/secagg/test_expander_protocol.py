"""SecAgg+ on the expander in the library (docs/SECAGG_GRAPH.md, "The expander"): masks and
shares along the union of k/2 random cycles (at most k distinct neighbours each), and the
survivor floor T: no holder signs, or answers for, a survivor set of fewer than T holders,
and the aggregator fails a step that leaves fewer than T.

K = 16, k = 6 (three cycles), t_k = 3, committee (m, τ) = (7, 5), c = 2, T = 14, h = 12
(h + c = T). The roster's keys are fresh for every session, so the graph is too: the run
id is the first of a fixed list whose graph gives every holder 4 or 5 distinct neighbours
for some, 6 at most (``graph_run``, asserted). With at least 4, a round survives any
K − T = 2 holders dropped: a survivor keeps at least 2 = t_k − 1 neighbours in S, a
dropped holder at least 3 = t_k holders of its shares.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace
from typing import Any

import pytest

from ldpem.common.secagg import (
    Aggregator,
    ConsistencyCheck,
    Holder,
    MaskedInput,
    RoundParameters,
    SecAggError,
    SecAggRefused,
    UnmaskRequest,
)
from ldpem.common.secagg.consistency import (
    SurvivorSignature,
    check_signatures,
    check_signed_set,
    sign_survivors,
    survivor_set_bytes,
)
from ldpem.common.secagg.graph import cycles
from ldpem.common.secagg.graph.cycles import CycleGraph
from ldpem.common.secagg.graph.harary import NeighbourGraph, graph_seed
from ldpem.common.secagg.neighbourhood import check_certificate, round_graph
from tests.common.secagg.kit import RUN, Consortium, run_round, to_bundles, wire

K, DEGREE, T_K, COLLUDERS, FLOOR, HONEST = 16, 6, 3, 2, 14, 12


def expander(run_id: str, **change: Any) -> RoundParameters:
    """The expander's round 0 parameters of run ``run_id`` (``change``: fields replaced)."""
    parameters = RoundParameters(
        run_id,
        0,
        K,
        T_K,
        32,
        COLLUDERS,
        neighbours=DEGREE,
        committee=7,
        committee_threshold=5,
        honest=HONEST,
        survivors=FLOOR,
    )
    return replace(parameters, **change)


@dataclass(frozen=True)
class Setting:
    consortium: Consortium
    run_id: str
    graph: CycleGraph  # computed here, independently of the library's RoundGraph

    @property
    def parameters(self) -> RoundParameters:
        return expander(self.run_id)

    def degree(self, name: str) -> int:
        return len(self.graph.neighbours(name))


def _graph(consortium: Consortium, run_id: str) -> CycleGraph:
    seed = graph_seed(run_id, 0, consortium.roster.digest)
    return CycleGraph(consortium.roster.names, DEGREE, seed)


@pytest.fixture(scope="module")
def setting() -> Setting:
    consortium = Consortium.of(K)
    for attempt in range(200):  # each run id qualifies with probability about 0.8
        run_id = f"{RUN}-x{attempt}"
        graph = _graph(consortium, run_id)
        degrees = {len(graph.neighbours(n)) for n in consortium.names}
        if min(degrees) >= T_K + 1 and min(degrees) < DEGREE:
            return Setting(consortium, run_id, graph)
    raise AssertionError("no run id among 200 gives every holder 4 to 6 neighbours, some < 6")


def test_the_precondition_holds(setting: Setting) -> None:
    degrees = [setting.degree(n) for n in setting.consortium.names]
    assert min(degrees) >= T_K + 1 and min(degrees) < DEGREE and max(degrees) <= DEGREE


# Whole rounds


def _lowest(setting: Setting) -> str:
    """The holder with the fewest distinct neighbours (the first such in name order)."""
    return min(setting.consortium.names, key=setting.degree)


@pytest.mark.parametrize("drop", [0, K - FLOOR])
def test_an_expander_round_sums_the_survivors_along_distinct_neighbours(
    setting: Setting, drop: int
) -> None:
    low = _lowest(setting)
    dropped = [low, min(setting.graph.neighbours(low))][:drop]
    done = run_round(setting.consortium, setting.parameters, dropped=dropped)
    assert done.result == done.expected()
    assert len(done.request.survivors) == K - drop  # = T when K - T dropped: the floor exactly
    assert set(done.responses) == set(done.request.survivors)  # every survivor answered
    lists = done.aggregator.participant_lists()
    for name, bundle in done.bundles.items():
        around = setting.graph.neighbours(name)
        assert set(bundle.ciphertexts) == around
        assert {a.holder for a in lists[name].advertisements} == around | {name}
    assert len(done.bundles[low].ciphertexts) == setting.degree(low) < DEGREE


def test_the_expander_is_the_cycle_graph_and_the_aggregator_reads_its_adjacency(
    setting: Setting, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A holder evaluates its own neighbourhood once, pointwise; the aggregator builds the
    adjacency and never evaluates a holder pointwise (K of those would cost O(K²·k))."""
    pointwise: list[int] = []
    around = cycles._around

    def counted(place: int, *keys: object) -> object:
        pointwise.append(place)
        return around(place, *keys)  # type: ignore[arg-type]

    monkeypatch.setattr(cycles, "_around", counted)
    consortium = setting.consortium
    aggregator = Aggregator(consortium.roster, setting.parameters, dimension=1)
    assert aggregator.graph is not None and isinstance(aggregator.graph.graph, CycleGraph)
    for name in consortium.names:
        assert aggregator.graph.neighbours(name) == setting.graph.neighbours(name)
    assert pointwise == []
    holder = Holder(
        "h05", consortium.roster, consortium.keys["h05"], setting.parameters, min_honest=1
    )
    assert holder.graph is not None
    assert holder.graph.neighbours("h05") == setting.graph.neighbours("h05")
    assert pointwise == [setting.graph.names.index("h05")]
    harary = round_graph(consortium.roster, replace(setting.parameters, survivors=0, honest=2))
    assert harary is not None and isinstance(harary.graph, NeighbourGraph)


def test_shares_must_be_addressed_to_exactly_the_distinct_neighbours(setting: Setting) -> None:
    consortium, low = setting.consortium, _lowest(setting)
    holders = consortium.holders(setting.parameters)
    aggregator = Aggregator(consortium.roster, setting.parameters, dimension=1)
    for holder in holders.values():
        aggregator.receive_advertisement(holder.advertise())
    shares = holders[low].share_keys(wire(aggregator.participant_lists()[low]))
    assert set(shares.ciphertexts) == setting.graph.neighbours(low)  # fewer than k
    stranger = sorted(set(consortium.names) - setting.graph.neighbours(low) - {low})[0]
    one = next(iter(shares.ciphertexts.values()))
    for ciphertexts in (
        {**shares.ciphertexts, stranger: one},
        dict(list(shares.ciphertexts.items())[1:]),
    ):
        with pytest.raises(SecAggRefused, match="not addressed to exactly"):
            aggregator.receive_shares(replace(shares, ciphertexts=ciphertexts))
    aggregator.receive_shares(shares)


# The survivor floor at the holders


@dataclass
class Masked:
    """An expander round taken honestly up to the masked inputs (the consistency check not
    yet closed); ``late``: the masked inputs of the holders that dropped."""

    holders: dict[str, Holder]
    aggregator: Aggregator
    inputs: dict[str, list[int]]
    late: dict[str, MaskedInput]


def _to_masked(setting: Setting, dropped: Collection[str] = ()) -> Masked:
    shared = to_bundles(setting.consortium, setting.parameters)
    late = {}
    for name, holder in shared.holders.items():
        masked = holder.masked_input(shared.bundles[name], shared.inputs[name])
        if name in dropped:
            late[name] = masked
        else:
            shared.aggregator.receive_masked_input(masked)
    return Masked(shared.holders, shared.aggregator, shared.inputs, late)


def _finish(stage: Masked) -> list[int]:
    """The rest of the round, honestly: the sum the aggregator returns."""
    check = stage.aggregator.consistency_check()
    for name in check.survivors:
        stage.aggregator.receive_signature(stage.holders[name].sign_survivors(check))
    for name, request in stage.aggregator.unmask_requests().items():
        stage.aggregator.receive_unmask_response(stage.holders[name].unmask(request))
    return [int(v) for v in stage.aggregator.result()]


def _check(setting: Setting, survivors: Collection[str]) -> ConsistencyCheck:
    names = setting.consortium.roster.names
    return wire(ConsistencyCheck(setting.run_id, 0, tuple(sorted(survivors)), names))


def _locally_fine(setting: Setting, name: str, survivors: Collection[str]) -> None:
    """The Harary graph's checks of ``name`` on ``survivors`` pass (every holder masked with
    all its neighbours in an honest round): only the floor can refuse the set."""
    around = setting.graph.neighbours(name)
    check_signed_set(survivors, own=name, masked_with=around | {name}, t_min=T_K, neighbours=around)


def test_a_survivor_set_of_exactly_t_is_signed_and_of_t_minus_one_refused(
    setting: Setting,
) -> None:
    stage = _to_masked(setting)
    everyone = setting.consortium.names
    signer, refuser = everyone[0], everyone[1]
    at_floor = [n for n in everyone if n not in everyone[-(K - FLOOR) :]]
    below = at_floor[:-1]
    assert len(at_floor) == FLOOR and {signer, refuser} <= set(below)
    signature = stage.holders[signer].sign_survivors(_check(setting, at_floor))
    message = survivor_set_bytes(setting.run_id, 0, at_floor, setting.consortium.roster.names)
    assert setting.consortium.roster.verify(signer, signature.signature, message)
    _locally_fine(setting, refuser, below)
    with pytest.raises(SecAggRefused) as refused:
        stage.holders[refuser].sign_survivors(_check(setting, below))
    assert str(refused.value) == f"the survivor set has {FLOOR - 1} holders, fewer than T = 14"


def test_an_unmasking_request_over_t_is_answered_and_over_t_minus_one_refused(
    setting: Setting,
) -> None:
    low = _lowest(setting)
    gone = [low, sorted(setting.graph.neighbours(low))[0]]
    stage = _to_masked(setting, dropped=gone)
    check = stage.aggregator.consistency_check()
    assert len(check.survivors) == FLOOR
    for name in check.survivors:
        stage.aggregator.receive_signature(stage.holders[name].sign_survivors(check))
    requests = stage.aggregator.unmask_requests()
    answerer, refuser = check.survivors[0], check.survivors[1]
    response = stage.holders[answerer].unmask(wire(requests[answerer]))
    stage.aggregator.receive_unmask_response(response)
    # the refuser signed S (|S| = T); a request over S less a holder it did not share keys with
    request = requests[refuser]
    left_out = sorted(set(check.survivors) - setting.graph.neighbours(refuser) - {refuser})[0]
    smaller = replace(request, survivors=tuple(n for n in request.survivors if n != left_out))
    with pytest.raises(SecAggRefused) as refused:
        stage.holders[refuser].unmask(wire(smaller))
    assert str(refused.value) == f"the survivor set has {FLOOR - 1} holders, fewer than T = 14"
    with pytest.raises(SecAggRefused, match="refused earlier"):  # and its round is over
        stage.holders[refuser].unmask(request)


def _split(setting: Setting) -> tuple[set[str], set[str], set[str]]:
    """A split a coordinator would want: a small set A (an edge u–v), colluders C (a
    neighbour of u and one of v) so that each member of A has t_k − 1 = 2 neighbours in
    A ∪ C, and the honest neighbours of A outside it, more than K − T: excluding them
    leaves A closed, its sum learnable but for the floor. The first such edge in name
    order."""
    graph = setting.graph
    for u in setting.consortium.names:
        for v in sorted(graph.neighbours(u)):
            if v < u:
                continue
            colluders = {min(graph.neighbours(u) - {v})}
            colluders.add(min(graph.neighbours(v) - {u} - colluders))
            outside = set(graph.neighbours(u) | graph.neighbours(v)) - {u, v} - colluders
            if len(outside) > K - FLOOR:
                return {u, v}, colluders, outside
    raise AssertionError("no edge with more than K - T honest neighbours outside it")


def test_the_split_attack_is_refused_by_every_holder(setting: Setting) -> None:
    """The coordinator excludes every honest neighbour of A = {u, v} outside A (more than
    K − T holders): A's members pass the Harary graph's checks on that S, but every honest
    holder refuses to sign it, the colluders' signatures cannot certify it, and an
    unmasking request over it, however signed, is refused by every holder."""
    group, colluders, outside = _split(setting)
    consortium = setting.consortium
    assert len(colluders) <= COLLUDERS < 5  # τ = 5: the colluders alone cannot certify
    split = sorted(set(consortium.names) - outside)
    assert len(split) < FLOOR
    for name in group:
        _locally_fine(setting, name, split)  # the Harary graph would let A sign
    stage = _to_masked(setting)
    expected = f"the survivor set has {len(split)} holders, fewer than T = 14"
    honest = sorted(set(consortium.names) - colluders)
    for name in honest:
        with pytest.raises(SecAggRefused) as refused:
            stage.holders[name].sign_survivors(_check(setting, split))
        assert str(refused.value) == expected
    # What the coordinator can sign: the colluders' own signatures, and junk.
    signed = [
        sign_survivors(consortium.keys[c], c, setting.run_id, 0, split, consortium.roster.names)
        for c in sorted(colluders)
    ]
    forged = [SurvivorSignature(n, setting.run_id, 0, bytes(64)) for n in sorted(group)]
    dropped = tuple(sorted(outside))
    graph = stage.aggregator.graph
    assert graph is not None
    roster, own = consortium.roster, honest[0]
    request = UnmaskRequest(setting.run_id, 0, tuple(split), dropped, tuple(signed))
    check_signatures(request, roster, t_min=0)  # valid, but too few on the committee
    with pytest.raises(SecAggRefused, match="committee signatures of its survivor set"):
        check_certificate(request, graph, own=own, masked_with=())
    for lie, match in ((signed + signed, "two signatures of"), (signed + forged, "roster key")):
        with pytest.raises(SecAggRefused, match=match):
            check_signatures(replace(request, signatures=tuple(lie)), roster, t_min=0)
    # Holders (of another run of the round) that signed the honest S, all K, and are then
    # asked over the split S.
    stage = _to_masked(setting)
    check = stage.aggregator.consistency_check()
    for name in check.survivors:
        stage.aggregator.receive_signature(stage.holders[name].sign_survivors(check))
    for name in honest:
        request = UnmaskRequest(setting.run_id, 0, tuple(split), dropped, tuple(signed + forged))
        with pytest.raises(SecAggRefused) as refused:
            stage.holders[name].unmask(request)
        assert str(refused.value) == expected  # the floor, before anything else


# The survivor floor at the aggregator


@pytest.mark.parametrize("where", ["silent", "no_shares", "dropped", "garbage"])
def test_the_aggregator_fails_the_step_below_the_floor(setting: Setting, where: str) -> None:
    low = _lowest(setting)
    three = [low, *sorted(setting.graph.neighbours(low))[:2]]
    if where == "garbage":  # two drop, a third is excluded by a neighbour it sent garbage
        victim = sorted(setting.graph.neighbours(three[2]) - set(three))[0]
        kwargs = {"dropped": three[:2], "garbage": [(three[2], victim)]}
    else:
        kwargs = {where: three}
    with pytest.raises(SecAggError) as failed:
        run_round(setting.consortium, setting.parameters, **kwargs)  # type: ignore[arg-type]
    assert type(failed.value) is SecAggError
    message = str(failed.value)
    assert message.startswith(f"only {FLOOR - 1} holders ")
    assert message.endswith("fewer than the survivor floor T = 14: the round cannot go on")
    assert "\n" not in message


def test_a_step_failed_below_the_floor_stays_open_for_a_late_input(setting: Setting) -> None:
    low = _lowest(setting)
    three = [low, *sorted(setting.graph.neighbours(low))[:2]]
    stage = _to_masked(setting, dropped=three)
    with pytest.raises(SecAggError, match="fewer than the survivor floor T = 14"):
        stage.aggregator.consistency_check()
    stage.aggregator.receive_masked_input(stage.late[three[2]])
    total = _finish(stage)
    survivors = set(setting.consortium.names) - set(three[:2])
    assert total == [sum(stage.inputs[n][j] for n in survivors) % 2**32 for j in range(2)]


# The parameters


def test_the_floor_is_bound_in_the_advertisement(setting: Setting) -> None:
    consortium = setting.consortium
    aggregator = Aggregator(consortium.roster, setting.parameters, dimension=1)
    other = consortium.holders(expander(setting.run_id, survivors=FLOOR + 1))["h00"]
    assert wire(other.advertise()).parameters.survivors == FLOOR + 1
    with pytest.raises(SecAggRefused, match="advertises"):
        aggregator.receive_advertisement(wire(other.advertise()))


@pytest.mark.parametrize("survivors", [HONEST + COLLUDERS, K])
def test_the_floor_at_its_edges_is_accepted(survivors: int) -> None:
    assert expander(RUN, survivors=survivors).expander


@pytest.mark.parametrize(
    "change",
    [
        {"survivors": HONEST + COLLUDERS - 1},
        {"survivors": K + 1},
        {"survivors": -1},
        {"survivors": 10**12},
        {"honest": 0},
    ],
)
def test_the_floor_beyond_its_edges_is_refused(change: dict[str, int]) -> None:
    with pytest.raises(SecAggRefused, match="the expander's survivors T must be in"):
        expander(RUN, **change)
