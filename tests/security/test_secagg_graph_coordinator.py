"""The real ``ldpem client`` of a run on the SecAgg+ graph against a coordinator that LIES
(issue 29; docs/SECAGG_GRAPH.md, docs/PRIVACY.md). The fake coordinator of
tests/security/test_secagg_coordinator.py, here over K = 16 holders on the graph (c = 2,
10% dropouts: k = 6, t_k = 5, committee 4 of 5, h = 3): h0 is the agent, the 15 others are
in-process ``Holder``s, and the fake hands each its own participant list and unmasking
request (``GraphRelay``). Every lie must end the agent (exit 2, one line) before it sends
what the lie was for:

* published graph values that differ from the agent's own recomputation from K, c, δ and
  h (a sparser graph, a weaker committee, a larger h, another t_k): refused before any
  message, before any spend;
* an h below the agent's ``--min-honest``: refused the same way;
* a participant list naming a holder outside h0's neighbourhood: refused before h0's
  shares leave.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request, Response

from ldpem.client.ledger import Ledger
from ldpem.common.secagg import (
    Aggregator,
    EncryptedShares,
    Holder,
    KeyAdvertisement,
    MaskedInput,
    ParticipantList,
    Roster,
    SurvivorSignature,
    UnmaskResponse,
    generate_signing_key,
    public_key_bytes,
    signing_key_to_pem,
)
from ldpem.common.secagg.graph import NeighbourGraph, graph_seed
from ldpem.common.secagg.runvalues import round_parameters, run_graph
from ldpem.common.wire import HospitalEnrolment, PublicParameters, RunCreate, public_parameters
from tests.fedkit import live_server, process_manager, token_file
from tests.security.test_malicious_coordinator import agent_argv, gmm_data, write_csv
from tests.security.test_secagg_coordinator import RECORDS, ROUNDS, RUN, TOKEN, D, Outcome

pytestmark = pytest.mark.slow

K, C = 16, 2
NAMES = tuple(f"h{i}" for i in range(K))


@dataclass
class GraphConsortium:
    keys: dict[str, Any]
    roster: Roster
    params: PublicParameters

    @classmethod
    def make(cls) -> GraphConsortium:
        keys = {n: generate_signing_key() for n in NAMES}
        roster = Roster({n: public_key_bytes(k) for n, k in keys.items()})
        request = RunCreate(
            model="gmm",
            d=D,
            sigma=1.0,
            rounds=ROUNDS,
            mechanism="secagg",
            epsilon=1.0,
            delta=1e-5,
            secagg_topology="graph",
            colluders=C,
            dropout_share=0.1,
            roster=json.loads(roster.to_json()),
            hospitals=[
                HospitalEnrolment(name=n, records=RECORDS, token=f"{TOKEN}-{n}") for n in NAMES
            ],
        )
        return cls(keys, roster, public_parameters(request))


@dataclass
class GraphRound:
    others: dict[str, Holder]
    aggregator: Aggregator
    lists: dict[str, ParticipantList] = field(default_factory=dict)
    bundles: dict[str, Any] = field(default_factory=dict)
    result: list[int] | None = None


@dataclass
class GraphFake:
    consortium: GraphConsortium
    #: The participant list sent to h0 in round 0 instead of its own (None: its own).
    list_lie: bool = False
    #: Changes to the published params (``graph`` fields by name, or t_min).
    params_change: dict[str, Any] = field(default_factory=dict)
    #: Changes to the ``graph`` of the params the round endpoint sends in round 1 only.
    round1_change: dict[str, Any] = field(default_factory=dict)
    posts: list[tuple[int, str]] = field(default_factory=list)
    rounds: dict[int, GraphRound] = field(default_factory=dict)

    def params(self) -> dict[str, Any]:
        params = self.consortium.params.model_dump(mode="json")
        for name, value in self.params_change.items():
            if name in params:
                params[name] = value
            else:
                params["graph"][name] = value
        return params

    def round(self, t: int) -> GraphRound:
        if t not in self.rounds:
            c = self.consortium
            parameters = round_parameters(c.params, RUN, t)
            others = {
                n: Holder(n, c.roster, c.keys[n], parameters, min_honest=1)
                for n in NAMES
                if n != "h0"
            }
            self.rounds[t] = GraphRound(others, Aggregator(c.roster, parameters, dimension=D))
        return self.rounds[t]

    def app(self) -> FastAPI:
        app = FastAPI()
        params = self.params()
        changed = {**params, "graph": {**params["graph"], **self.round1_change}}

        @app.get("/v1/me")
        def me() -> dict[str, Any]:
            return {"run_id": RUN, "hospital": "h0", "records": RECORDS, "params": params}

        @app.get("/v1/runs/{run}/round")
        def round_(run: str, after: int = -1) -> dict[str, Any]:
            t = after + 1
            return {
                "run_id": RUN,
                "status": "running" if t < ROUNDS else "finished",
                "round": t,
                "beta": [0.5, -0.5, 0.25],
                "deadline": None,
                "params": changed if t == 1 else params,
            }

        @app.post("/v1/runs/{run}/rounds/{t}/secagg/{step}")
        async def post(run: str, t: int, step: str, request: Request) -> dict[str, str]:
            self.posts.append((t, step))
            self.receive(self.round(t), step, json.loads(await request.body()))
            return {"status": "accepted"}

        @app.get("/v1/runs/{run}/rounds/{t}/secagg/{what}")
        def get(run: str, t: int, what: str) -> Response:
            sent = self.answer(t, self.round(t), what)
            return Response(json.dumps(sent.to_dict()), media_type="application/json")

        return app

    def receive(self, r: GraphRound, step: str, body: dict[str, Any]) -> None:
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
                a.receive_masked_input(holder.masked_input(r.bundles[name], [0] * D))
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

    def answer(self, t: int, r: GraphRound, what: str) -> Any:
        if what == "participants":
            # The lie: the mesh's list, every holder's advertisement, to h0.
            return r.aggregator.participants() if self.list_lie and t == 0 else r.lists["h0"]
        if what == "bundle":
            return r.bundles["h0"]
        if what == "consistency-check":
            return r.aggregator.consistency_check()
        return r.aggregator.unmask_requests()["h0"]


@pytest.fixture(scope="module")
def consortium() -> GraphConsortium:
    return GraphConsortium.make()


def attack(tmp_path: Path, fake: GraphFake, *, min_honest: int = 3) -> Outcome:
    """Run the agent h0 against ``fake`` (as test_secagg_coordinator's ``attack``)."""
    write_csv(tmp_path, gmm_data(RECORDS, D))
    (tmp_path / "h0.key").write_bytes(signing_key_to_pem(fake.consortium.keys["h0"]))
    (tmp_path / "h0.key").chmod(0o600)
    (tmp_path / "roster.json").write_text(fake.consortium.roster.to_json())
    extra = ("--signing-key", "h0.key", "--roster", "roster.json", "--min-honest", str(min_honest))
    budget = ["--epsilon", "100", "--delta", "0.5"]
    with live_server(fake.app()) as url, process_manager(tmp_path) as procs:
        token_file(tmp_path, TOKEN, "hospital.token")
        process = procs.start(
            f"agent-{time.monotonic_ns()}", *agent_argv(url, "gmm", budget, extra)
        )
        code = process.wait(120)
        log = procs.log(process)
    return Outcome(code, log, list(fake.posts))


def refused_before_anything(tmp_path: Path, outcome: Outcome, words: str) -> str:
    """Exit 2, one line naming ``words``, no traceback, nothing posted, nothing charged
    and nothing bound; the line."""
    assert outcome.code == 2, outcome.log[-3000:]
    lines = [line for line in outcome.log.splitlines() if words in line]
    assert lines and "Traceback" not in outcome.log, outcome.log[-3000:]
    assert outcome.posts == []
    ledger = Ledger(tmp_path / "state")
    try:
        assert ledger.entries() == [] and ledger.binding(RUN) is None
    finally:
        ledger.close()
    return lines[-1]


def test_an_honest_graph_fake_runs_to_the_end(tmp_path: Path, consortium: GraphConsortium) -> None:
    """The control: with every value and message honest the agent takes part in both
    rounds on the graph, and the fake's sum (h0's input plus zeros) is not zero."""
    graph = run_graph(K, C, 0.1, 2)
    assert consortium.params.graph is not None
    assert consortium.params.graph.neighbours == graph.k < K - 1
    fake = GraphFake(consortium)
    outcome = attack(tmp_path, fake)
    assert outcome.code == 0, outcome.log[-3000:]
    steps = ["advertise", "shares", "masked", "signature", "unmask"]
    assert outcome.posts == [(t, s) for t in range(ROUNDS) for s in steps]
    assert any(v != 0 for v in fake.rounds[0].result or [])


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"neighbours": 4}, "neighbours = 4"),  # a sparser graph than K, c and δ need
        # A committee whose colluders could certify two survivor sets.
        ({"committee": 4, "committee_threshold": 3}, "committee = 4"),
        ({"honest": 4}, "honest = 4"),  # more honest shares: shares too small for the ε
        ({"t_min": 4}, "t_min = 4"),  # a lower threshold t_k
        ({"dropout_share": 0.2}, "dropout share 0.2"),  # inputs giving other values
    ],
    ids=["k", "committee", "h", "t_k", "delta"],
)
def test_graph_values_that_differ_from_the_recomputation_are_refused_before_anything(
    tmp_path: Path, consortium: GraphConsortium, change: dict[str, Any], named: str
) -> None:
    fake = GraphFake(consortium, params_change=change)
    line = refused_before_anything(tmp_path, attack(tmp_path, fake), "graph does not check")
    assert named in line


def test_an_h_below_the_agents_min_honest_is_refused_before_anything(
    tmp_path: Path, consortium: GraphConsortium
) -> None:
    assert consortium.params.honest_shares == 3
    outcome = attack(tmp_path, GraphFake(consortium), min_honest=4)
    line = refused_before_anything(tmp_path, outcome, "--min-honest 4")
    assert "h = 3" in line


def test_a_participant_list_naming_a_non_neighbour_is_refused_before_the_shares(
    tmp_path: Path, consortium: GraphConsortium
) -> None:
    """The coordinator hands h0 every holder's advertisement, as on the mesh: h0 would share
    its seeds with holders outside its neighbourhood (more corrupt holders than t_k
    allows for). Refused before its shares leave."""
    seed = graph_seed(RUN, 0, consortium.roster.digest)
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
    tmp_path: Path, consortium: GraphConsortium
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
