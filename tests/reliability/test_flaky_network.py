"""A flaky network between the agents and the coordinator (tests.reliability.proxy): the
run completes, every round counts each hospital exactly once, each agent's ledger shows each
round spent once, and the trajectory is the one of a run over a perfect network."""

from __future__ import annotations

from pathlib import Path

import pytest

from ldpem.processes import Processes
from tests.fedkit import TOKENS, run_request
from tests.reliability.kit import check_exact_run, gmm_cluster
from tests.reliability.proxy import Faults, FlakyProxy

COUNTS = [200, 201, 202]


def _run(procs: Processes, tmp_path: Path, rounds: int, seed: int) -> Faults:
    cluster, paths = gmm_cluster(procs, tmp_path, COUNTS)
    request = run_request(d=3, rounds=rounds, round_deadline=3600)
    request["hospitals"] = [
        {"name": f"h{i}", "records": c, "token": TOKENS[i]} for i, c in enumerate(COUNTS)
    ]
    created = cluster.create(request)
    faults = Faults()
    proxy = FlakyProxy(cluster.port, faults, seed=seed)
    try:
        agents = [cluster.agent(i, p, url=proxy.url, wait=2) for i, p in enumerate(paths)]
        for process in agents:
            assert process.wait(600) == 0, procs.log(process)[-3000:]
    finally:
        proxy.close()
    check_exact_run(cluster, created, paths, COUNTS)
    counts = faults.counts
    injected = sum(v for k, v in counts.items() if k != "connections")
    assert injected >= 10 and counts["responses cut"] >= 1, counts
    print(f"faults injected over {rounds} rounds: {dict(counts)}")
    return faults


def test_flaky_network_short(procs: Processes, tmp_path: Path) -> None:
    _run(procs, tmp_path, rounds=6, seed=1)


@pytest.mark.slow
def test_flaky_network_long(procs: Processes, tmp_path: Path) -> None:
    _run(procs, tmp_path, rounds=20, seed=2)
