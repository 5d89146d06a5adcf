"""A real federated secagg run: a coordinator and agent processes (issue 21)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import httpx
import pytest

from ldpem.client.data import load_records
from ldpem.common.protocol import FederatedStreams
from ldpem.common.simulation import simulate_run
from ldpem.common.wire import PublicParameters
from ldpem.processes import Processes, free_port, start_coordinator
from tests.cli.secaggkit import hospitals, keys_and_roster, start_agent
from tests.fedkit import cli_create_run, write_gmm_data

pytestmark = pytest.mark.slow

D, ROUNDS = 3, 3


def _run(
    procs: Processes, tmp_path: Path, counts: list[int], **request: object
) -> tuple[str, str, dict[str, object]]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    start_coordinator(
        procs, state=tmp_path / "coordinator.sqlite", port=port, env={"LDPEM_TICK": "0.1"}
    )
    _, _, roster = keys_and_roster(tmp_path, len(counts))
    created = cli_create_run(
        tmp_path,
        url,
        [],
        hospitals=hospitals(counts),
        d=D,
        rounds=ROUNDS,
        epsilon=1.0,
        mechanism="secagg",
        roster=roster,
        forecast=False,
        **request,
    )
    return url, created["run_id"], created["params"]


def test_federated_secagg_equals_its_simulation(procs: Processes, tmp_path: Path) -> None:
    counts = [400, 300, 350, 320]
    seeds = [200 + i for i in range(len(counts))]
    paths, _ = write_gmm_data(tmp_path, counts, D)
    url, run_id, created = _run(procs, tmp_path, counts, seed=3)
    agents = [
        start_agent(
            procs,
            tmp_path,
            url,
            i,
            p,
            tmp_path / f"h{i}.key",
            tmp_path / "roster.json",
            "--seed",
            str(seeds[i]),
        )
        for i, p in enumerate(paths)
    ]
    for agent in agents:
        assert agent.wait(180) == 0, procs.log(agent)[-3000:]
    summary = httpx.get(f"{url}/v1/runs/{run_id}").json()
    assert summary["status"] == "finished"
    federated = httpx.get(f"{url}/v1/runs/{run_id}/trajectory").json()["betas"]
    params = PublicParameters.model_validate(created)
    simulated = simulate_run(
        params,
        holders=[load_records(p, "gmm") for p in paths],
        beta0=federated[0],
        streams=FederatedStreams(run_id=run_id, seeds=seeds, run_seed=3),
    )
    assert [[float(v) for v in b] for b in simulated.betas] == federated
    # The stored messages hold no report: the persisted reports of the agents appear nowhere.
    db = sqlite3.connect(tmp_path / "coordinator.sqlite")
    stored = " ".join(body for (body,) in db.execute("SELECT body FROM secagg_messages"))
    for i in range(len(counts)):
        ledger = sqlite3.connect(tmp_path / f"agent{i}" / "ledger.sqlite")
        for (body,) in ledger.execute("SELECT body FROM rounds"):
            for value in json.loads(body)["total"]:
                assert repr(value) not in stored
