"""Shared by the fault tests: a coordinator and agents as real processes, restartable."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import httpx

from ldpem.client.ledger import Ledger
from ldpem.common.wire import PublicParameters, expected_round_count
from ldpem.processes import Processes, free_port, start_agent, start_coordinator
from tests.fedkit import AGENT_BUDGET, TOKENS, admin_headers, replay, write_gmm_data

AGENT_SEED = 100


class Cluster:
    """One coordinator (port and state file fixed, so it can be killed and restarted) and
    the command lines of the agents."""

    def __init__(self, procs: Processes, tmp_path: Path, *, log_level: str = "warning") -> None:
        self.procs = procs
        self.tmp_path = tmp_path
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.state = tmp_path / "coordinator.sqlite"
        self.log_level = log_level
        self.server: subprocess.Popen[bytes] | None = None

    def start_coordinator(self) -> subprocess.Popen[bytes]:
        self.server, _ = start_coordinator(
            self.procs,
            state=self.state,
            port=self.port,
            log_level=self.log_level,
            env={"LDPEM_TICK": "0.1"},
            timeout=120,
        )
        return self.server

    def kill_coordinator(self) -> None:
        assert self.server is not None
        self.server.kill()
        self.server.wait(30)

    def create(self, request: dict[str, Any]) -> dict[str, Any]:
        response = httpx.post(
            f"{self.url}/v1/runs", json=request, headers=admin_headers(), timeout=120
        )
        assert response.status_code == 201, response.text
        created: dict[str, Any] = response.json()
        return created

    def agent(
        self,
        i: int,
        data: Path,
        *,
        url: str | None = None,
        give_up: float = 300,
        wait: float = 5,
        log_level: str = "info",
        env: dict[str, str] | None = None,
        model: str = "gmm",
    ) -> subprocess.Popen[bytes]:
        return start_agent(
            self.procs,
            f"agent{i}",
            url=url or self.url,
            token=TOKENS[i],
            model=model,
            data=data,
            state=self.tmp_path / f"agent{i}",
            log_level=log_level,
            args=[
                *AGENT_BUDGET,
                "--seed",  # reproducible noise, so that check_exact_run can replay the run
                str(AGENT_SEED + i),
                "--wait",
                str(wait),
                "--give-up",
                str(give_up),
            ],
            env=env,
        )

    def get(self, path: str) -> Any:
        return httpx.get(f"{self.url}{path}", timeout=30).json()


def gmm_cluster(procs: Processes, tmp_path: Path, counts: list[int]) -> tuple[Cluster, list[Path]]:
    """A started coordinator, and GMM records (d = 3) for one hospital per count."""
    paths, _ = write_gmm_data(tmp_path, counts, 3)
    cluster = Cluster(procs, tmp_path)
    cluster.start_coordinator()
    return cluster, paths


def check_exact_run(
    cluster: Cluster, created: dict[str, Any], paths: list[Path], counts: list[int]
) -> list[list[float]]:
    """Finished; every round counts each hospital exactly once; β^0…β^T equal, bit for bit,
    the offline recomputation (what an unkilled run produces); each agent's ledger holds
    each round once, its budget spent once."""
    run_id = created["run_id"]
    params = PublicParameters.model_validate(created["params"])
    run = cluster.get(f"/v1/runs/{run_id}")
    assert (run["status"], run["round"]) == ("finished", params.rounds)
    rounds = cluster.get(f"/v1/runs/{run_id}/rounds")
    assert len(rounds) == params.rounds
    names = [f"h{i}" for i in range(len(counts))]
    for t, r in enumerate(rounds):
        assert sorted(r["reporters"]) == names and len(r["reporters"]) == len(names), (t, r)
        assert r["count"] == sum(expected_round_count(c, params.rounds, t) for c in counts)
    betas: list[list[float]] = cluster.get(f"/v1/runs/{run_id}/trajectory")["betas"]
    expected = replay(
        params,
        run_id,
        betas[0],
        paths,
        [AGENT_SEED + i for i in range(len(counts))],
        epsilon=params.epsilon,
        delta=params.delta,
    )
    assert betas == expected  # JSON floats: bit for bit
    for i in range(len(counts)):
        ledger = Ledger(cluster.tmp_path / f"agent{i}")
        try:
            entries = ledger.entries(run_id)
            assert [e.round for e in entries] == list(range(params.rounds))
            # "persisted": the agent was killed after the coordinator committed its report but
            # before it recorded the answer, and the round had closed when it came back. The
            # spend is in the ledger either way, and the rounds above show the report counted
            # exactly once.
            statuses = [e.status for e in entries]
            assert all(s in ("acknowledged", "persisted") for s in statuses), statuses
            spent = ledger.spent_epsilon(entries[0].data, delta=params.delta, accounting="exact")
            assert spent <= params.epsilon * (1 + 1e-9)
        finally:
            ledger.close()
    return betas
