"""A secagg run on the SecAgg+ graph through the real coordinator (issue 29, item "SecAgg+";
docs/SECAGG_GRAPH.md): the run publishes the graph's values, the coordinator hands each
holder its OWN participant list and unmasking request, cut to its neighbourhood, and a
round with one holder dropped sums exactly its survivors' inputs, also across restarts
that replay the per-holder outputs. In-process (the app on its state file, closed and
opened again, as tests/server/secagg/test_restart.py); the library's ``Holder`` plays
each hospital, so that one can also send what no honest agent sends."""

from __future__ import annotations

import dataclasses
import inspect
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ldpem.common.secagg import (
    ConsistencyCheck,
    Holder,
    ParticipantList,
    Roster,
    RoundParameters,
    ShareBundle,
    UnmaskRequest,
    generate_signing_key,
    public_key_bytes,
)
from ldpem.common.secagg.graph.harary import NeighbourGraph, committee, graph_seed
from ldpem.common.secagg.runvalues import (
    grid_of,
    run_digest,
    run_graph,
    run_shares_mechanism,
    signed_sum,
)
from tests.fedkit import admin_headers, run_request
from tests.secaggdriver import DrivenRun, InProcessCoordinator, create_run, hospital_tokens, stored

#: K = 16 with c = 2 and 10% dropouts: k = 6 < K − 1, t_k = 5, committee (5, 4), h = 3
#: (``run_graph``; asserted against the run's published values below).
K, C, DROPOUT, D = 16, 2, 0.1, 3
NAMES = [f"g{i:02d}" for i in range(K)]
KEYS = {n: generate_signing_key() for n in NAMES}
ROSTER = Roster({n: public_key_bytes(key) for n, key in KEYS.items()})
#: The holder that drops out after sharing its keys (before its masked input).
GONE = "g05"


def read(cls: Any, data: dict[str, Any]) -> Any:
    """``cls.from_dict(data)``, over the roster's names where the wire reads its sets over
    them (branch gbytes's compact encoding of S gives ``from_dict`` an ``order``)."""
    if "order" in inspect.signature(cls.from_dict).parameters:
        return cls.from_dict(data, ROSTER.names)
    return cls.from_dict(data)


def create(c: InProcessCoordinator) -> DrivenRun:
    """The graph run of the K hospitals (``NAMES``) on ``c``."""
    return create_run(
        c.client,
        "graph",
        roster=ROSTER,
        shares={"secagg_topology": "graph", "colluders": C, "dropout_share": DROPOUT},
        round_deadline=4.0,  # the masked step closes at it, without the dropped holder
        on_short="fail",
    )


def test_the_run_publishes_the_derived_graph(coordinator: InProcessCoordinator) -> None:
    params = create(coordinator).params
    graph = run_graph(K, C, DROPOUT, 2)
    assert graph.k < K - 1
    assert params.graph is not None
    assert (params.t_min, params.colluders) == (graph.threshold, C)
    published = params.graph.model_dump()
    assert published == {
        "dropout_share": DROPOUT,
        "min_honest_shares": 2,
        "neighbours": graph.k,
        "committee": graph.committee.size,
        "committee_threshold": graph.committee.threshold,
        "honest": graph.honest_shares,
    }
    assert (graph.k, graph.threshold, graph.committee.size, graph.honest_shares) == (6, 5, 5, 3)
    # The noise is sized for h honest shares, not t_min − c.
    assert params.honest_shares == graph.honest_shares
    assert run_shares_mechanism(params).noise_shares == graph.honest_shares  # type: ignore[attr-defined]


def test_the_forecast_of_a_graph_run_simulates_its_graph(
    coordinator: InProcessCoordinator,
) -> None:
    """The run's forecast simulates the graph's t_k and h (the mesh's t_min and c would be
    refused: c = 2 ≥ 2·t_k − K)."""
    from ldpem.common.planning.study import shares_threshold
    from ldpem.common.wire import HospitalEnrolment, RunCreate
    from ldpem.server.forecast import run_problem

    run = create(coordinator)
    params = run.params
    request = RunCreate(
        model="gmm",
        d=D,
        sigma=1.0,
        rounds=2,
        mechanism="secagg",
        epsilon=1.0,
        secagg_topology="graph",
        colluders=C,
        dropout_share=DROPOUT,
        roster=json.loads(ROSTER.to_json()),
        hospitals=[HospitalEnrolment(name=n, records=100, token=t) for n, t in run.tokens.items()],
    )
    study = run_problem(request, params).study("secagg", 0)
    assert params.t_min is not None and params.honest_shares is not None
    expected = (params.t_min, params.t_min - params.honest_shares)
    assert shares_threshold(study, K) == expected


@pytest.mark.parametrize(
    "change",
    [
        {"t_min": 9},
        {"roster_extra": True},
        {"secagg_topology": "mesh", "dropout_share": 0.1},
        {"min_honest_shares": 14},
    ],
    ids=["t_min given", "roster larger than K", "graph inputs on the mesh", "full mesh"],
)
def test_a_graph_run_is_refused_when_its_values_cannot_hold(
    coordinator: InProcessCoordinator, change: dict[str, Any]
) -> None:
    roster = ROSTER
    if change.pop("roster_extra", False):
        roster = Roster({**dict(ROSTER.items()), "zz": public_key_bytes(generate_signing_key())})
    request = run_request(
        records=100,
        d=D,
        rounds=2,
        mechanism="secagg",
        secagg_topology="graph",
        colluders=C,
        roster=json.loads(roster.to_json()),
    )
    request.update(change)
    tokens = hospital_tokens("graph", NAMES)
    request["hospitals"] = [{"name": n, "records": 100, "token": tokens[n]} for n in NAMES]
    response = coordinator.client.post("/v1/runs", json=request, headers=admin_headers())
    assert response.status_code == 422, response.text


def test_a_graph_round_serves_each_holder_its_own_messages_and_survives_restarts(
    coordinator: InProcessCoordinator, tmp_path: Path
) -> None:
    """Every holder's participant list holds exactly its neighbours that advertised (and
    itself), its unmasking request names as dropped only its own neighbours and carries
    only the committee's and its masking neighbours' signatures; a holder's shares
    addressed beyond its neighbours are refused (422, not 5xx); a restart after the
    participant lists and one after the unmasking requests serve the same per-holder
    messages again; the round's sum is that of the 15 survivors' inputs."""
    run = create(coordinator)
    run_id, params = run.run_id, run.params
    assert params.graph is not None and params.modulus_bits is not None
    g = params.graph
    parameters = RoundParameters(
        run_id,
        0,
        K,
        params.t_min or 0,
        params.modulus_bits,
        C,
        neighbours=g.neighbours,
        committee=g.committee,
        committee_threshold=g.committee_threshold,
        honest=g.honest,
        run_digest=run_digest(params),
    )
    holders = {n: Holder(n, ROSTER, KEYS[n], parameters, min_honest=1) for n in NAMES}
    seed = graph_seed(run_id, 0, ROSTER.digest)
    graph = NeighbourGraph(ROSTER.names, g.neighbours, seed)
    members = committee(ROSTER.names, g.committee, seed)
    rng = np.random.default_rng(5)
    bits = params.modulus_bits
    inputs = {n: [int(v) % 2**bits for v in rng.integers(-500, 500, size=D)] for n in NAMES}

    for n, h in holders.items():
        assert run.post(0, n, "advertise", h.advertise().to_dict()).status_code == 200
    lists = {n: run.answer(0, n, "participants") for n in NAMES}
    for n, body in lists.items():
        listed = {a.holder for a in ParticipantList.from_dict(body).advertisements}
        assert listed == graph.neighbours(n) | {n}, n
    coordinator.restart()
    run.client = coordinator.client
    assert {n: run.answer(0, n, "participants") for n in NAMES} == lists

    shares = {n: h.share_keys(ParticipantList.from_dict(lists[n])) for n, h in holders.items()}
    stranger = next(n for n in NAMES if n not in graph.neighbours("g00") | {"g00"})
    wide = dataclasses.replace(
        shares["g00"],
        ciphertexts={
            **shares["g00"].ciphertexts,
            stranger: next(iter(shares["g00"].ciphertexts.values())),
        },
    )
    assert run.post(0, "g00", "shares", wide.to_dict()).status_code == 422
    for n, s in shares.items():
        assert run.post(0, n, "shares", s.to_dict()).status_code == 200
    bundles = {n: ShareBundle.from_dict(run.answer(0, n, "bundle")) for n in NAMES}
    for n in NAMES:
        assert set(bundles[n].ciphertexts) == graph.neighbours(n)
        if n != GONE:
            masked = holders[n].masked_input(bundles[n], inputs[n])
            assert run.post(0, n, "masked", masked.to_dict()).status_code == 200
    survivors = [n for n in NAMES if n != GONE]
    checks = {n: read(ConsistencyCheck, run.answer(0, n, "consistency-check")) for n in survivors}
    for n in survivors:
        assert list(checks[n].survivors) == survivors
        signed = holders[n].sign_survivors(checks[n])
        assert run.post(0, n, "signature", signed.to_dict()).status_code == 200
    requests = {n: run.answer(0, n, "unmask-request") for n in survivors}
    coordinator.restart()
    run.client = coordinator.client
    assert {n: run.answer(0, n, "unmask-request") for n in survivors} == requests
    for n in survivors:
        request = read(UnmaskRequest, requests[n])
        assert set(request.dropped) == graph.neighbours(n) & {GONE}, n
        signers = {s.holder for s in request.signatures}
        assert signers <= members | graph.neighbours(n), n
        # τ committee signatures certify S: the relay sends the fewest that do (the
        # masking neighbours' first), never more than it needs.
        assert len(signers & members) >= g.committee_threshold, n
        response = holders[n].unmask(request)
        assert run.post(0, n, "unmask", response.to_dict()).status_code == 200
    end = time.monotonic() + 30
    while run.summary()["round"] == 0:
        assert time.monotonic() < end, "round 0 did not close"
        time.sleep(0.05)
    rows = stored(tmp_path, run_id)
    kinds = [k for k, _, _ in rows]
    # One participant list and one unmasking request per holder, stored once each.
    assert kinds.count("participants") == K
    assert kinds.count("unmask_request") == len(survivors)
    assert {h for k, h, _ in rows if k == "participants"} == set(NAMES)
    total = json.loads(next(b for k, _, b in rows if k == "sum"))
    grid = grid_of(run_shares_mechanism(params))
    residues = [sum(inputs[n][j] for n in survivors) for j in range(D)]
    assert total["total"] == [grid * v for v in signed_sum(residues, bits)]
    assert total["survivors"] == survivors
