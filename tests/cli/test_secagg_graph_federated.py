"""A real federated secagg run on the SecAgg+ graph (issue 29; docs/SECAGG_GRAPH.md): a
coordinator process and K = 16 ``ldpem client`` processes on 127.0.0.1, the run created by
``ldpem run create`` with ``"secagg_topology": "graph"`` (c = 2, 10% dropouts: k = 6 <
K − 1, t_k = 5, committee 4 of 5, h = 3). Each agent recomputes the graph's values before
it sends anything and masks and shares along its neighbourhood only; one holder is killed
in the last round after it shared its keys and before its masked input left. Round 0
(everyone) equals its simulation bit for bit, and the last round's unmasked sum is exactly
the sum of the 15 survivors' persisted reports."""

from __future__ import annotations

import json
import math
from pathlib import Path

import httpx
import pytest

from ldpem.client.data import load_records
from ldpem.client.ledger import Ledger
from ldpem.common.planning.simulator import simulate_run
from ldpem.common.protocol import FederatedStreams
from ldpem.common.secagg import ParticipantList
from ldpem.common.secagg.runvalues import run_graph
from ldpem.processes import Processes
from tests.fedkit import write_gmm_data
from tests.secaggkit import secagg_run, start_agent

pytestmark = pytest.mark.slow

K, C, D, ROUNDS = 16, 2, 3, 2
#: Killed (``LDPEM_AGENT_FAULT``) in the last round once its masked input is made, before
#: it is sent: it shared its keys, so its neighbours reveal its masking key's shares.
GONE = K - 1


def test_a_graph_run_of_agent_processes_finishes_with_one_holder_dropped(
    procs: Processes, tmp_path: Path
) -> None:
    counts = [150 + 10 * i for i in range(K)]
    seeds = [300 + i for i in range(K)]
    paths, _ = write_gmm_data(tmp_path, counts, D)
    run = secagg_run(
        procs,
        tmp_path,
        counts,
        d=D,
        rounds=ROUNDS,
        seed=3,
        secagg_topology="graph",
        colluders=C,
        dropout_share=0.1,
        round_deadline=15.0,  # the last round's masked step closes at it, without GONE
        on_short="fail",
    )
    params = run.params
    graph = run_graph(K, C, 0.1, 2)
    assert params.graph is not None and params.graph.neighbours == graph.k < K - 1
    assert params.t_min == graph.threshold
    agents = {}
    for i, path in enumerate(paths):
        fault: dict[str, str | None] | None = None
        if i == GONE:
            fault = {"LDPEM_AGENT_FAULT": f"kill-after-mask:{ROUNDS - 1}"}
        agents[i] = start_agent(
            procs,
            tmp_path,
            run.url,
            i,
            path,
            tmp_path / f"h{i}.key",
            tmp_path / "roster.json",
            "--seed",
            str(seeds[i]),
            "--max-colluders",  # the c = C the graph is derived for
            str(C),
            env=fault,
        )
    for i, agent in agents.items():
        code = agent.wait(240)
        assert code == (-9 if i == GONE else 0), procs.log(agent)[-3000:]
    log = procs.log(agents[0])
    assert f"h = {graph.honest_shares} (SecAgg+ graph: k = {graph.k}" in log, log[-3000:]
    summary = httpx.get(f"{run.url}/v1/runs/{run.run_id}").json()
    assert summary["status"] == "finished", summary
    federated = httpx.get(f"{run.url}/v1/runs/{run.run_id}/trajectory").json()["betas"]
    simulated = simulate_run(
        params,
        holders=[load_records(p, "gmm") for p in paths],
        beta0=federated[0],
        streams=FederatedStreams(run_id=run.run_id, seeds=seeds, run_seed=3),
    )
    # Round 0, every holder in: the federated β¹ is the simulation's, bit for bit.
    assert [float(v) for v in simulated.betas[1]] == federated[1]
    # The last round: the sum of exactly the survivors' reports (on the grid: exact).
    stored = run.stored()[ROUNDS - 1]
    (total,) = [body for kind, _, body in stored if kind == "sum"]
    survivors = [f"h{i}" for i in range(K) if i != GONE]
    assert total["survivors"] == sorted(survivors)
    reports = run.reports(ROUNDS - 1)
    expected = [math.fsum(json.loads(reports[n])["total"][j] for n in survivors) for j in range(D)]
    assert total["total"] == expected
    # Every participant list the coordinator stored names only the holder's neighbourhood.
    lists = [(h, b) for kind, h, b in run.stored()[0] if kind == "participants"]
    assert len(lists) == K
    assert all(len(ParticipantList.from_dict(b).advertisements) == graph.k + 1 for _, b in lists)
    # The ledger charges the run's ε, which assumes the h honest shares the noise is sized for.
    ledger = Ledger(tmp_path / "agent0")
    try:
        entries = ledger.entries(run.run_id)
    finally:
        ledger.close()
    assert [(e.epsilon, e.status) for e in entries] == [(params.epsilon, "masked")] * ROUNDS
