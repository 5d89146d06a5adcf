"""A real federated secagg run: a coordinator and agent processes (issue 21)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from ldpem.client.data import load_records
from ldpem.common.planning.simulator import simulate_run
from ldpem.common.protocol import FederatedStreams
from ldpem.processes import Processes
from tests.fedkit import write_gmm_data, write_model_data
from tests.secaggkit import SecAggRun, secagg_run

pytestmark = pytest.mark.slow

D, ROUNDS = 3, 3


def simulated_betas(
    run: SecAggRun, paths: list[Path], model: str, beta0: list[float], seeds: list[int]
) -> list[list[float]]:
    """β⁰ … β^T (each of the model's dimension) of the run simulated in this process from
    ``beta0`` on the agents' records and random streams (``seeds``, run seed 3)."""
    simulated = simulate_run(
        run.params,
        holders=[load_records(p, model) for p in paths],
        beta0=beta0,
        streams=FederatedStreams(run_id=run.run_id, seeds=seeds, run_seed=3),
    )
    return [[float(v) for v in b] for b in simulated.betas]


def test_federated_secagg_equals_its_simulation(procs: Processes, tmp_path: Path) -> None:
    counts = [400, 300, 350, 320]
    seeds = [200 + i for i in range(len(counts))]
    paths, _ = write_gmm_data(tmp_path, counts, D)
    run = secagg_run(procs, tmp_path, counts, d=D, rounds=ROUNDS, seed=3)
    url, run_id = run.url, run.run_id
    agents = run.start_agents(paths, seeds=seeds)
    for agent in agents.values():
        assert agent.wait(180) == 0, procs.log(agent)[-3000:]
    summary = httpx.get(f"{url}/v1/runs/{run_id}").json()
    assert summary["status"] == "finished"
    federated = httpx.get(f"{url}/v1/runs/{run_id}/trajectory").json()["betas"]
    assert simulated_betas(run, paths, "gmm", federated[0], seeds) == federated
    # The stored messages hold no report: the persisted reports of the agents appear nowhere.
    stored = " ".join(json.dumps(b) for rows in run.stored().values() for _, _, b in rows)
    for t in range(ROUNDS):
        reports = run.reports(t)
        assert len(reports) == len(counts)
        for body in reports.values():
            for value in json.loads(body)["total"]:
                assert repr(value) not in stored


def test_a_federated_secagg_mixture_run_equals_its_simulation(
    procs: Processes, tmp_path: Path
) -> None:
    # gmmk, K = 3: the masked sums, the modulus, the coordinator's range check of the sum
    # and the noise shares' calibration are all of β's K·(d + 1) coordinates.
    counts = [200, 180, 160, 150]
    seeds = [300 + i for i in range(len(counts))]
    options = {"components": 3}
    paths, _ = write_model_data(tmp_path, counts, D, model="gmmk", model_options=options)
    run = secagg_run(
        procs, tmp_path, counts, model="gmmk", model_options=options, d=D, rounds=2, seed=3
    )
    assert run.params.model_options == options
    agents = run.start_agents(paths, seeds=seeds, model="gmmk", flags=("--components", "3"))
    for agent in agents.values():
        assert agent.wait(180) == 0, procs.log(agent)[-3000:]
    url, run_id = run.url, run.run_id
    assert httpx.get(f"{url}/v1/runs/{run_id}").json()["status"] == "finished"
    federated = httpx.get(f"{url}/v1/runs/{run_id}/trajectory").json()["betas"]
    assert {len(beta) for beta in federated} == {3 * (D + 1)}
    assert simulated_betas(run, paths, "gmmk", federated[0], seeds) == federated
