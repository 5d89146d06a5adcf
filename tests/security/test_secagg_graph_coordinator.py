"""The real ``ldpem client`` of a run on the SecAgg+ graph against a coordinator that LIES
(issue 29; docs/SECAGG_GRAPH.md, docs/PRIVACY.md). The fake coordinator of
tests/security/test_secagg_coordinator.py (tests/secaggkit.py), here over K = 16 holders on
the graph (c = 2, 10% dropouts: k = 6, t_k = 5, committee 4 of 5, h = 3): h0 is the agent,
the 15 others are in-process ``Holder``s, and the fake hands each its own participant list
and unmasking request (``GraphFake``). Every lie must end the agent (exit 2, one line)
before it sends what the lie was for:

* published graph values that differ from the agent's own recomputation from K, c, δ and
  h (a sparser graph, a weaker committee, a larger h, another t_k): refused before any
  message, before any spend;
* an h below the agent's ``--min-honest``: refused the same way;
* a participant list naming a holder outside h0's neighbourhood: refused before h0's
  shares leave.

And on the expander at K = 200 (values only: a changed survivor floor T, a changed k, T
left out, an h below ``--min-honest``: nothing sent, charged or bound; T in the binding).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ldpem.client.binding import first_difference, run_binding
from ldpem.client.secagg import SecAggConfig, check_graph, load_secagg
from ldpem.common.core.accounting import Budget
from ldpem.common.secagg import (
    Aggregator,
    EncryptedShares,
    Holder,
    KeyAdvertisement,
    MaskedInput,
    ParticipantList,
    SurvivorSignature,
    UnmaskResponse,
    signing_key_to_pem,
)
from ldpem.common.secagg.graph.harary import NeighbourGraph, graph_seed
from ldpem.common.secagg.runvalues import (
    round_parameters,
    run_expander,
    run_graph,
    run_shares_mechanism,
)
from ldpem.common.secagg.steps import HOLDER_STEPS
from ldpem.common.wire import Identity, PublicParameters
from tests.secaggkit import (
    FAKE_D,
    FAKE_ROUNDS,
    FAKE_RUN,
    FakeConsortium,
    attack,
    refused_before_anything,
)

pytestmark = pytest.mark.slow

K, C = 16, 2
NAMES = tuple(f"h{i}" for i in range(K))


@dataclass
class GraphRound:
    others: dict[str, Holder]
    aggregator: Aggregator
    lists: dict[str, ParticipantList] = field(default_factory=dict)
    bundles: dict[str, Any] = field(default_factory=dict)
    result: list[int] | None = None


@dataclass
class GraphFake:
    consortium: FakeConsortium
    #: The participant list sent to h0 in round 0 instead of its own (None: its own).
    list_lie: bool = False
    #: Changes to the published params (``graph`` fields by name, or t_min).
    params_change: dict[str, Any] = field(default_factory=dict)
    #: Changes to the ``graph`` of the params the round endpoint sends in round 1 only.
    round1_change: dict[str, Any] = field(default_factory=dict)
    posts: list[tuple[int, str]] = field(default_factory=list)
    rounds: dict[int, GraphRound] = field(default_factory=dict)

    def published(self, t: int | None) -> dict[str, Any]:
        params = self.consortium.params.model_dump(mode="json")
        for name, value in self.params_change.items():
            if name in params:
                params[name] = value
            else:
                params["graph"][name] = value
        if t == 1:
            params["graph"].update(self.round1_change)
        return params

    def round(self, t: int) -> GraphRound:
        if t not in self.rounds:
            c = self.consortium
            parameters = round_parameters(c.params, FAKE_RUN, t)
            aggregator = Aggregator(c.roster, parameters, dimension=FAKE_D)
            self.rounds[t] = GraphRound(c.others(parameters), aggregator)
        return self.rounds[t]

    def take(self, t: int, step: str, body: dict[str, Any]) -> None:
        r = self.round(t)
        a = r.aggregator
        if step == "advertise":
            a.receive_advertisement(KeyAdvertisement.from_dict(body))
            for holder in r.others.values():
                a.receive_advertisement(holder.advertise())
            r.lists = a.participant_lists()
        elif step == "shares":
            a.receive_shares(EncryptedShares.from_dict(body))
            for name, holder in r.others.items():
                a.receive_shares(holder.share_keys(r.lists[name]))
            r.bundles = a.share_bundles()
        elif step == "masked":
            a.receive_masked_input(MaskedInput.from_dict(body))
            for name, holder in r.others.items():
                a.receive_masked_input(holder.masked_input(r.bundles[name], [0] * FAKE_D))
        elif step == "signature":
            a.receive_signature(SurvivorSignature.from_dict(body))
            check = a.consistency_check()
            for holder in r.others.values():
                a.receive_signature(holder.sign_survivors(check))
        elif step == "unmask":
            a.receive_unmask_response(UnmaskResponse.from_dict(body))
            requests = a.unmask_requests()
            for name, holder in r.others.items():
                a.receive_unmask_response(holder.unmask(requests[name]))
            r.result = [int(v) for v in a.result()]

    def send(self, t: int, what: str) -> Any:
        r = self.round(t)
        if what == "participants":
            # The lie: the mesh's list, every holder's advertisement, to h0.
            return r.aggregator.participants() if self.list_lie and t == 0 else r.lists["h0"]
        if what == "bundle":
            return r.bundles["h0"]
        if what == "consistency-check":
            return r.aggregator.consistency_check()
        return r.aggregator.unmask_requests()["h0"]


@pytest.fixture(scope="module")
def consortium() -> FakeConsortium:
    return FakeConsortium.make(NAMES, secagg_topology="graph", colluders=C, dropout_share=0.1)


def test_an_honest_graph_fake_runs_to_the_end(tmp_path: Path, consortium: FakeConsortium) -> None:
    """The control: with every value and message honest the agent takes part in both
    rounds on the graph, and the fake's sum (h0's input plus zeros) is not zero."""
    graph = run_graph(K, C, 0.1, 2)
    assert consortium.params.graph is not None
    assert consortium.params.graph.neighbours == graph.k < K - 1
    fake = GraphFake(consortium)
    outcome = attack(tmp_path, fake)
    assert outcome.code == 0, outcome.log[-3000:]
    steps = list(HOLDER_STEPS)
    assert outcome.posts == [(t, s) for t in range(FAKE_ROUNDS) for s in steps]
    assert any(v != 0 for v in fake.rounds[0].result or [])


def test_an_h_below_the_agents_min_honest_is_refused_before_anything(
    tmp_path: Path, consortium: FakeConsortium
) -> None:
    assert consortium.params.honest_shares == 3
    outcome = attack(tmp_path, GraphFake(consortium), min_honest=4)
    line = refused_before_anything(tmp_path, outcome, "--min-honest 4")
    assert "h = 3" in line


def test_a_participant_list_naming_a_non_neighbour_is_refused_before_the_shares(
    tmp_path: Path, consortium: FakeConsortium
) -> None:
    """The coordinator hands h0 every holder's advertisement, as on the mesh: h0 would share
    its seeds with holders outside its neighbourhood (more corrupt holders than t_k
    allows for). Refused before its shares leave."""
    seed = graph_seed(FAKE_RUN, 0, consortium.roster.digest)
    assert consortium.params.graph is not None
    neighbours = NeighbourGraph(
        consortium.roster.names, consortium.params.graph.neighbours, seed
    ).neighbours("h0")
    assert len(neighbours) < K - 1  # the lie names holders outside them
    outcome = attack(tmp_path, GraphFake(consortium, list_lie=True))
    assert outcome.code == 2, outcome.log[-3000:]
    assert "secure aggregation refused" in outcome.log and "neighbour" in outcome.log
    assert "Traceback" not in outcome.log
    assert outcome.posts == [(0, "advertise")]


def test_a_graph_value_changed_during_the_run_is_refused(
    tmp_path: Path, consortium: FakeConsortium
) -> None:
    """The graph's values are bound at the first contact like t_min and c: round 1's
    params with another k (even one the agent would recompute for other inputs) end the
    agent before anything of round 1 is sent."""
    fake = GraphFake(consortium, round1_change={"neighbours": 8})
    outcome = attack(tmp_path, fake)
    assert outcome.code == 2, outcome.log[-3000:]
    assert "changed its parameters" in outcome.log and "graph" in outcome.log
    assert "Traceback" not in outcome.log
    assert all(t == 0 for t, _ in outcome.posts) and len(outcome.posts) == 5


# The expander (docs/SECAGG_GRAPH.md, "The expander"): feasible from K = 200 (c = 66, 10%
# dropouts: k = 150, T = 180), too many holders for an in-process round here, so only the
# refusals before anything is sent are played; the honest values are checked in-process.
EXPANDER_K = 200


@pytest.fixture(scope="module")
def expander() -> FakeConsortium:
    names = ("h0", *(f"x{i:03d}" for i in range(1, EXPANDER_K)))
    return FakeConsortium.make(names, secagg_topology="expander")


def test_the_honest_expander_values_check_and_the_agent_logs_them(
    tmp_path: Path, expander: FakeConsortium
) -> None:
    """The control of the refusals below: the published values are run_expander's, the
    agent's check passes them, and its session describes the expander with T."""
    params = expander.params
    values = run_expander(EXPANDER_K, EXPANDER_K // 3, 0.1, 2)
    assert params.graph is not None and params.graph.survivors == values.survivors
    check_graph(params)
    (tmp_path / "h0.key").write_bytes(signing_key_to_pem(expander.keys["h0"]))
    (tmp_path / "roster.json").write_text(expander.roster.to_json())
    config = SecAggConfig(tmp_path / "h0.key", tmp_path / "roster.json", min_honest=3)
    session = load_secagg(config, params, "h0", run_shares_mechanism(params))
    assert session.honest_shares == values.honest_shares
    assert session.describe() == (
        f"h = {values.honest_shares} (SecAgg+ expander: k = {values.k}, t_k = "
        f"{values.threshold}, T = {values.survivors}, committee {values.committee.threshold} "
        f"of {values.committee.size}, c = {EXPANDER_K // 3})"
    )


@pytest.mark.parametrize(
    ("topology", "change", "named"),
    [
        ("consortium", {"neighbours": 4}, "neighbours = 4"),  # sparser than K, c and δ need
        # A committee whose colluders could certify two survivor sets.
        ("consortium", {"committee": 4, "committee_threshold": 3}, "committee = 4"),
        # More honest shares: shares too small for the ε.
        ("consortium", {"honest": 4}, "honest = 4"),
        ("consortium", {"t_min": 4}, "t_min = 4"),  # a lower threshold t_k
        ("consortium", {"dropout_share": 0.2}, "dropout share 0.2"),  # other inputs' values
        ("expander", {"survivors": 170}, "survivors = 170"),  # a lower floor: more excluded
        ("expander", {"neighbours": 148}, "neighbours = 148"),  # a sparser expander
        ("expander", {"survivors": 0}, "publishes"),  # passed off as the Harary graph's
    ],
    ids=[
        "graph-k",
        "graph-committee",
        "graph-h",
        "graph-t_k",
        "graph-delta",
        "expander-T",
        "expander-k",
        "expander-no T",
    ],
)
def test_graph_values_that_differ_from_the_recomputation_are_refused_before_anything(
    tmp_path: Path,
    request: pytest.FixtureRequest,
    topology: str,
    change: dict[str, Any],
    named: str,
) -> None:
    """On the Harary graph (fixture ``consortium``) and on the expander."""
    fake = GraphFake(request.getfixturevalue(topology), params_change=change)
    line = refused_before_anything(tmp_path, attack(tmp_path, fake), "graph does not check")
    assert named in line


def test_an_expander_h_below_the_agents_min_honest_is_refused_before_anything(
    tmp_path: Path, expander: FakeConsortium
) -> None:
    honest = expander.params.honest_shares
    assert honest is not None
    outcome = attack(tmp_path, GraphFake(expander), min_honest=honest + 1)
    line = refused_before_anything(tmp_path, outcome, f"--min-honest {honest + 1}")
    assert f"h = {honest}" in line


def test_the_ledger_binds_the_expanders_t(expander: FakeConsortium) -> None:
    """T is in the run's binding like k and t_k: a restart or a round whose params carry
    another T differs from the binding in ``params.graph.survivors`` (refused as any
    changed parameter: ``binding.check_binding``)."""

    def binding(params: PublicParameters) -> dict[str, Any]:
        me = Identity(run_id=FAKE_RUN, hospital="h0", records=100, params=params)
        mechanism = run_shares_mechanism(params)
        text = run_binding(
            me,
            mechanisms=[(mechanism, 0.0)],
            budget=Budget(epsilon=1.0, delta=1e-5, accounting="exact"),
            allow_weaker=False,
            dataset="d",
        )
        result: dict[str, Any] = json.loads(text)
        return result

    params = expander.params
    assert params.graph is not None
    bound = binding(params)
    assert bound["params"]["graph"]["survivors"] == params.graph.survivors
    lowered = params.model_copy(
        update={"graph": params.graph.model_copy(update={"survivors": params.graph.survivors - 1})}
    )
    assert first_difference(bound, binding(lowered)).startswith(
        f"params.graph.survivors was {params.graph.survivors}, now"
    )
