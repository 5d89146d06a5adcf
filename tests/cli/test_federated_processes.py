"""Acceptance: a coordinator and hospital agents as real processes on 127.0.0.1.

* 3 agents, 6·10⁴ synthetic GMM records, local model, ε = 1, 10 rounds: the run finishes,
  its β trajectory is exactly the one recomputed offline from the agents' seeds and data,
  and its final error lies in the range the simulator gives for the same setting.
* kill -9 of the coordinator in the middle of a round, and restart: the run completes with
  no report lost or counted twice (again: the exact offline trajectory).
* kill -9 of an agent after it persisted a report and before it sent it: on restart it
  resends the same bytes and its ledger shows the round spent once.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from numpy.typing import NDArray

from ldpem.client.ledger import Ledger
from ldpem.client.trust import agent_mechanism
from ldpem.common.core.accounting import Budget
from ldpem.common.mechanisms import Mechanism
from ldpem.common.models import Records, get_model
from ldpem.common.planning.simulator import every_round, run_gradient_em
from ldpem.common.wire import ReportIn, expected_round_count
from ldpem.processes import Processes, wait_until
from tests.fedkit import CreatedRun, replay, settled, write_gmm_data
from tests.fedkit import cli_create_run as create_run
from tests.reliability.kit import Cluster

pytestmark = pytest.mark.slow


def agent(cluster: Cluster, i: int, data: Path, **env: str) -> subprocess.Popen[bytes]:
    """``ldpem client`` of hospital h``i`` on ``data``, with its research seed (so that
    check_exact can replay the run), waiting 10 s for a round and giving up after 120 s."""
    return cluster.agent(i, data, wait=10, give_up=120, env=env or None)


@dataclass
class StartedRun(CreatedRun):
    """A run created on a started coordinator (``started_run``): the cluster, the record
    files of the hospitals (h{i} holds ``counts[i]`` records), β* (d,) and the answer of
    ``ldpem run create``."""

    cluster: Cluster
    counts: list[int]
    paths: list[Path]
    beta_star: NDArray[np.float64]
    created: dict[str, Any]

    @property
    def url(self) -> str:
        return self.cluster.url

    def reporters(self, t: int) -> list[str]:
        """The hospitals whose report of round t the coordinator holds (none before t)."""
        rounds = httpx.get(f"{self.url}/v1/runs/{self.run_id}/rounds", timeout=5).json()
        return list(rounds[t]["reporters"]) if len(rounds) > t else []


def started_run(
    procs: Processes, tmp_path: Path, counts: list[int], *, d: int, rounds: int, **request: Any
) -> StartedRun:
    """GMM records in d dimensions for one hospital per count, a started coordinator and a
    run of them at ε = 1 created with ``ldpem run create`` (``request``: more of it)."""
    paths, beta_star = write_gmm_data(tmp_path, counts, d)
    cluster = Cluster(procs, tmp_path)
    cluster.start_coordinator()
    created = create_run(tmp_path, cluster.url, counts, d=d, rounds=rounds, epsilon=1.0, **request)
    return StartedRun(cluster, counts, paths, beta_star, created)


def finish(procs: Processes, agents: list[subprocess.Popen[bytes]]) -> None:
    for process in agents:
        code = process.wait(180)
        assert code == 0, procs.log(process)[-2000:]


def check_exact(started: StartedRun) -> list[list[float]]:
    """The run finished, every hospital reported each round once, and β^0…β^T equal the
    offline recomputation (a lost or double-counted report would change them)."""
    url, run_id, params = started.url, started.run_id, started.params
    paths, counts = started.paths, started.counts
    run = httpx.get(f"{url}/v1/runs/{run_id}").json()
    assert (run["status"], run["round"]) == ("finished", params.rounds)
    rounds = httpx.get(f"{url}/v1/runs/{run_id}/rounds").json()
    names = [f"h{i}" for i in range(len(counts))]
    for t, r in enumerate(rounds):
        assert r["reporters"] == names
        assert r["count"] == sum(expected_round_count(c, params.rounds, t) for c in counts)
    betas: list[list[float]] = httpx.get(f"{url}/v1/runs/{run_id}/trajectory").json()["betas"]
    expected = replay(
        params,
        run_id,
        betas[0],
        paths,
        [100 + i for i in range(len(counts))],
        epsilon=params.epsilon,
        delta=params.delta,
    )
    assert betas == expected
    return betas


def test_three_hospitals_sixty_thousand_records_epsilon_one(
    procs: Processes, tmp_path: Path
) -> None:
    counts = [20_000, 20_000, 20_000]
    d, rounds = 10, 10
    started = started_run(procs, tmp_path, counts, d=d, rounds=rounds)
    paths, beta_star, params = started.paths, started.beta_star, started.params
    finish(procs, [agent(started.cluster, i, p) for i, p in enumerate(paths)])
    betas = check_exact(started)
    model = get_model("gmm")
    error = model.error(np.array(betas[-1]), beta_star)

    # The simulator on the same records, start and mechanism, over 20 seeds of the noise.
    budget = Budget(epsilon=params.epsilon, delta=params.delta, accounting="exact")
    mechanism = agent_mechanism(params, budget=budget)[0]
    mechanisms = [mechanism] * len(paths)
    mean = one_more_draw(error, paths, betas[0], beta_star, rounds=rounds, mechanisms=mechanisms)
    assert error < 0.5 * 3.0  # far better than the trivial estimate β = 0 (error ‖β*‖ = 3)
    # The forecast (computed in the background after creation) is of the same order.
    with httpx.Client(base_url=started.url) as client:
        summary = settled(client, started.run_id)
    assert 0.5 * mean < summary["expected_error"] < 2.0 * mean
    assert summary["warning"] is None


def one_more_draw(
    error: float,
    paths: list[Path],
    beta0: list[float],
    beta_star: NDArray[np.float64],
    *,
    rounds: int,
    mechanisms: list[Mechanism],
) -> float:
    """The mean final error of the simulator on the run's records (GMM, σ = 1), start β⁰
    and mechanisms over 20 seeds of the noise, once the federated run's ``error`` is found
    to be one more draw from that distribution: within 4 sd of its mean (Chebyshev: a
    chance below 1/16 whatever the distribution; ~6e-5 if normal)."""
    holders = [Records(np.load(p)) for p in paths]
    errors = [
        run_gradient_em(
            model=get_model("gmm"),
            holders=holders,
            sigma=1.0,
            mechanisms=every_round(mechanisms, rounds),
            beta0=np.array(beta0),
            rng=np.random.default_rng(seed),
            beta_star=beta_star,
        ).errors[-1]
        for seed in range(20)
    ]
    mean, sd = float(np.mean(errors)), float(np.std(errors, ddof=1))
    assert mean - 4 * sd <= error <= mean + 4 * sd, (error, mean, sd)
    return mean


def test_three_hospitals_hospital_level_mechanism(procs: Processes, tmp_path: Path) -> None:
    """--mechanism hospital with three real agents of different sizes: each truncates at its
    own scale and adds one draw to its sum; the run matches the offline replay exactly and
    its error is one more draw from the simulator's distribution."""
    counts = [30_000, 20_000, 10_000]
    d, rounds = 10, 10
    started = started_run(procs, tmp_path, counts, d=d, rounds=rounds, mechanism="hospital")
    paths, beta_star, params = started.paths, started.beta_star, started.params
    assert params.mechanism == "hospital" and params.scale is None
    # Agents started without --allow-weaker: the noise is still added on their machines.
    finish(procs, [agent(started.cluster, i, p) for i, p in enumerate(paths)])
    betas = check_exact(started)
    model = get_model("gmm")
    error = model.error(np.array(betas[-1]), beta_star)

    budget = Budget(epsilon=params.epsilon, delta=params.delta, accounting="exact")
    mechanisms = [agent_mechanism(params, budget=budget, records=c)[0] for c in counts]
    one_more_draw(error, paths, betas[0], beta_star, rounds=rounds, mechanisms=mechanisms)
    assert error < 0.2  # local DP gives ~1 at this n; hospital-level, central-like accuracy
    assert started.created["warning"] is None


def test_coordinator_killed_mid_round_loses_and_doubles_nothing(
    procs: Processes, tmp_path: Path
) -> None:
    started = started_run(procs, tmp_path, [3000, 3001, 3002], d=5, rounds=6)
    cluster, paths = started.cluster, started.paths
    early = [agent(cluster, i, paths[i]) for i in (0, 1)]

    # Round 0 holds two committed reports and waits for h2: kill -9 now.
    wait_until(
        lambda: started.reporters(0) == ["h0", "h1"], timeout=120, what="two reports in round 0"
    )
    cluster.kill_coordinator()
    cluster.start_coordinator()
    assert started.reporters(0) == ["h0", "h1"]
    late = agent(cluster, 2, paths[2])

    # Kill -9 again while all three agents are reporting, wherever that lands.
    wait_until(
        lambda: (
            httpx.get(f"{cluster.url}/v1/runs/{started.run_id}", timeout=5).json()["round"] >= 3
        ),
        timeout=120,
        what="round 3",
    )
    cluster.kill_coordinator()
    cluster.start_coordinator()
    finish(procs, [*early, late])
    check_exact(started)


def test_agent_killed_after_persisting_resends_the_same_report(
    procs: Processes, tmp_path: Path
) -> None:
    started = started_run(procs, tmp_path, [2000, 2000, 2000], d=4, rounds=5)
    cluster, paths, run_id = started.cluster, started.paths, started.run_id
    others = [agent(cluster, i, paths[i]) for i in (0, 2)]
    victim = agent(cluster, 1, paths[1], LDPEM_AGENT_FAULT="kill-after-persist:2")
    assert victim.wait(120) == -9, procs.log(victim)[-2000:]

    ledger_dir = tmp_path / "agent1"
    ledger = Ledger(ledger_dir)
    entry = ledger.entry(run_id, 2)
    assert entry is not None and entry.status == "persisted"
    persisted_at = _persisted_at(ledger_dir, run_id, 2)
    ledger.close()
    assert "h1" not in started.reporters(2)  # persisted, never sent

    restarted = agent(cluster, 1, paths[1])
    finish(procs, [*others, restarted])
    assert "round 2: resending the report persisted before (not redrawn)" in procs.log(restarted)

    ledger = Ledger(ledger_dir)
    again = ledger.entry(run_id, 2)
    assert again is not None and again.status == "acknowledged" and again.body == entry.body
    assert _persisted_at(ledger_dir, run_id, 2) == persisted_at
    assert len(ledger.entries(run_id)) == 5
    params = started.params
    spent = ledger.spent_epsilon(again.data, delta=params.delta, accounting="exact")
    assert spent == pytest.approx(params.epsilon, rel=1e-9)  # spent once, not twice
    ledger.close()

    # What the coordinator holds is exactly the persisted report.
    sent = ReportIn.model_validate_json(entry.body)
    with sqlite3.connect(cluster.state) as db:
        total, count = db.execute(
            "SELECT total, count FROM reports WHERE run_id = ? AND t = 2 AND hospital = 'h1'",
            (run_id,),
        ).fetchone()
    assert json.loads(total) == sent.total and count == sent.count
    check_exact(started)


def _persisted_at(directory: Path, run_id: str, t: int) -> float:
    with sqlite3.connect(directory / "ledger.sqlite") as db:
        (value,) = db.execute(
            "SELECT persisted_at FROM rounds WHERE run_key = ? AND round = ?", (run_id, t)
        ).fetchone()
    return float(value)
