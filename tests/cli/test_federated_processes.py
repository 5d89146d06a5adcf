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
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from ldpem.client.ledger import Ledger
from ldpem.client.trust import agent_mechanism
from ldpem.common.core.accounting import Budget
from ldpem.common.models import Records, get_model
from ldpem.common.planning.simulator import every_round, run_gradient_em
from ldpem.common.wire import PublicParameters, ReportIn, expected_round_count
from ldpem.processes import Processes, free_port, start_coordinator, wait_until
from tests.fedkit import AGENT_BUDGET, TOKENS, replay, settled, token_file, write_gmm_data
from tests.fedkit import cli_create_run as create_run

pytestmark = pytest.mark.slow


def coordinator(procs: Processes, port: int, state: Path) -> subprocess.Popen[bytes]:
    """``ldpem coordinator`` on ``port`` (fixed: it is restarted there) once healthy."""
    process, _ = start_coordinator(procs, state=state, port=port, env={"LDPEM_TICK": "0.1"})
    return process


def agent(
    procs: Processes, url: str, i: int, data: Path, state: Path, **env: str
) -> subprocess.Popen[bytes]:
    return procs.start(
        f"agent{i}",
        "client",
        "--coordinator",
        url,
        "--token-file",
        str(token_file(state, TOKENS[i], f"agent{i}.token")),
        "--data",
        str(data),
        "--model",
        "gmm",
        "--state",
        str(state / f"agent{i}"),
        *AGENT_BUDGET,
        "--seed",  # reproducible noise, so that check_exact can replay the run
        str(100 + i),
        "--wait",
        "10",
        "--give-up",
        "120",
        env=env or None,
    )


def finish(procs: Processes, agents: list[subprocess.Popen[bytes]]) -> None:
    for process in agents:
        code = process.wait(180)
        assert code == 0, procs.log(process)[-2000:]


def check_exact(
    url: str, created: dict[str, Any], paths: list[Path], counts: list[int]
) -> list[list[float]]:
    """The run finished, every hospital reported each round once, and β^0…β^T equal the
    offline recomputation (a lost or double-counted report would change them)."""
    run_id = created["run_id"]
    params = PublicParameters.model_validate(created["params"])
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
    paths, beta_star = write_gmm_data(tmp_path, counts, d)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    coordinator(procs, port, tmp_path / "coordinator.sqlite")
    created = create_run(tmp_path, url, counts, d=d, rounds=rounds, epsilon=1.0)
    finish(procs, [agent(procs, url, i, p, tmp_path) for i, p in enumerate(paths)])
    betas = check_exact(url, created, paths, counts)
    model = get_model("gmm")
    error = model.error(np.array(betas[-1]), beta_star)

    # The simulator on the same records, start and mechanism, over 20 seeds of the noise.
    params = PublicParameters.model_validate(created["params"])
    holders = [Records(np.load(p)) for p in paths]
    mechanism, _ = agent_mechanism(
        params, budget=Budget(epsilon=params.epsilon, delta=params.delta, accounting="exact")
    )
    errors = [
        run_gradient_em(
            model=model,
            holders=holders,
            sigma=1.0,
            mechanisms=every_round([mechanism] * len(holders), rounds),
            beta0=np.array(betas[0]),
            rng=np.random.default_rng(seed),
            beta_star=beta_star,
        ).errors[-1]
        for seed in range(20)
    ]
    mean, sd = float(np.mean(errors)), float(np.std(errors, ddof=1))
    # The federated run is one more draw from the simulator's distribution: within 4 sd of
    # its mean (Chebyshev: a chance below 1/16 whatever the distribution; ~6e-5 if normal).
    assert mean - 4 * sd <= error <= mean + 4 * sd, (error, mean, sd)
    assert error < 0.5 * 3.0  # far better than the trivial estimate β = 0 (error ‖β*‖ = 3)
    # The forecast (computed in the background after creation) is of the same order.
    with httpx.Client(base_url=url) as client:
        summary = settled(client, created["run_id"])
    assert 0.5 * mean < summary["expected_error"] < 2.0 * mean
    assert summary["warning"] is None


def test_three_hospitals_hospital_level_mechanism(procs: Processes, tmp_path: Path) -> None:
    """--mechanism hospital with three real agents of different sizes: each truncates at its
    own scale and adds one draw to its sum; the run matches the offline replay exactly and
    its error is one more draw from the simulator's distribution."""
    counts = [30_000, 20_000, 10_000]
    d, rounds = 10, 10
    paths, beta_star = write_gmm_data(tmp_path, counts, d)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    coordinator(procs, port, tmp_path / "coordinator.sqlite")
    created = create_run(
        tmp_path, url, counts, d=d, rounds=rounds, epsilon=1.0, mechanism="hospital"
    )
    params = PublicParameters.model_validate(created["params"])
    assert params.mechanism == "hospital" and params.scale is None
    # Agents started without --allow-weaker: the noise is still added on their machines.
    finish(procs, [agent(procs, url, i, p, tmp_path) for i, p in enumerate(paths)])
    betas = check_exact(url, created, paths, counts)
    model = get_model("gmm")
    error = model.error(np.array(betas[-1]), beta_star)

    holders = [Records(np.load(p)) for p in paths]
    mechanisms = [
        agent_mechanism(
            params,
            budget=Budget(epsilon=params.epsilon, delta=params.delta, accounting="exact"),
            records=c,
        )[0]
        for c in counts
    ]
    errors = [
        run_gradient_em(
            model=model,
            holders=holders,
            sigma=1.0,
            mechanisms=every_round(mechanisms, rounds),
            beta0=np.array(betas[0]),
            rng=np.random.default_rng(seed),
            beta_star=beta_star,
        ).errors[-1]
        for seed in range(20)
    ]
    mean, sd = float(np.mean(errors)), float(np.std(errors, ddof=1))
    # Within 4 sd of the simulator's mean (Chebyshev: a chance below 1/16 whatever the law).
    assert mean - 4 * sd <= error <= mean + 4 * sd, (error, mean, sd)
    assert error < 0.2  # local DP gives ~1 at this n; hospital-level, central-like accuracy
    assert created["warning"] is None


def test_coordinator_killed_mid_round_loses_and_doubles_nothing(
    procs: Processes, tmp_path: Path
) -> None:
    counts = [3000, 3001, 3002]
    paths, _ = write_gmm_data(tmp_path, counts, 5)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    state = tmp_path / "coordinator.sqlite"
    server = coordinator(procs, port, state)
    created = create_run(tmp_path, url, counts, d=5, rounds=6, epsilon=1.0)
    run_id = created["run_id"]
    early = [agent(procs, url, i, paths[i], tmp_path) for i in (0, 1)]

    def reporters(t: int) -> list[str]:
        rounds = httpx.get(f"{url}/v1/runs/{run_id}/rounds", timeout=5).json()
        return list(rounds[t]["reporters"]) if len(rounds) > t else []

    # Round 0 holds two committed reports and waits for h2: kill -9 now.
    wait_until(lambda: reporters(0) == ["h0", "h1"], timeout=120, what="two reports in round 0")
    server.kill()
    server.wait(10)
    server = coordinator(procs, port, state)
    assert reporters(0) == ["h0", "h1"]
    late = agent(procs, url, 2, paths[2], tmp_path)

    # Kill -9 again while all three agents are reporting, wherever that lands.
    wait_until(
        lambda: httpx.get(f"{url}/v1/runs/{run_id}", timeout=5).json()["round"] >= 3,
        timeout=120,
        what="round 3",
    )
    server.kill()
    server.wait(10)
    coordinator(procs, port, state)
    finish(procs, [*early, late])
    check_exact(url, created, paths, counts)


def test_agent_killed_after_persisting_resends_the_same_report(
    procs: Processes, tmp_path: Path
) -> None:
    counts = [2000, 2000, 2000]
    paths, _ = write_gmm_data(tmp_path, counts, 4)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    state = tmp_path / "coordinator.sqlite"
    coordinator(procs, port, state)
    created = create_run(tmp_path, url, counts, d=4, rounds=5, epsilon=1.0)
    run_id = created["run_id"]
    others = [agent(procs, url, i, paths[i], tmp_path) for i in (0, 2)]
    victim = agent(procs, url, 1, paths[1], tmp_path, LDPEM_AGENT_FAULT="kill-after-persist:2")
    assert victim.wait(120) == -9, procs.log(victim)[-2000:]

    ledger_dir = tmp_path / "agent1"
    ledger = Ledger(ledger_dir)
    entry = ledger.entry(run_id, 2)
    assert entry is not None and entry.status == "persisted"
    persisted_at = _persisted_at(ledger_dir, run_id, 2)
    ledger.close()
    rounds = httpx.get(f"{url}/v1/runs/{run_id}/rounds").json()
    assert "h1" not in rounds[2]["reporters"]  # persisted, never sent

    restarted = agent(procs, url, 1, paths[1], tmp_path)
    finish(procs, [*others, restarted])
    assert "round 2: resending the report persisted before (not redrawn)" in procs.log(restarted)

    ledger = Ledger(ledger_dir)
    again = ledger.entry(run_id, 2)
    assert again is not None and again.status == "acknowledged" and again.body == entry.body
    assert _persisted_at(ledger_dir, run_id, 2) == persisted_at
    assert len(ledger.entries(run_id)) == 5
    params = PublicParameters.model_validate(created["params"])
    spent = ledger.spent_epsilon(again.data, delta=params.delta, accounting="exact")
    assert spent == pytest.approx(params.epsilon, rel=1e-9)  # spent once, not twice
    ledger.close()

    # What the coordinator holds is exactly the persisted report.
    sent = ReportIn.model_validate_json(entry.body)
    with sqlite3.connect(state) as db:
        total, count = db.execute(
            "SELECT total, count FROM reports WHERE run_id = ? AND t = 2 AND hospital = 'h1'",
            (run_id,),
        ).fetchone()
    assert json.loads(total) == sent.total and count == sent.count
    check_exact(url, created, paths, counts)


def _persisted_at(directory: Path, run_id: str, t: int) -> float:
    with sqlite3.connect(directory / "ledger.sqlite") as db:
        (value,) = db.execute(
            "SELECT persisted_at FROM rounds WHERE run_key = ? AND round = ?", (run_id, t)
        ).fetchone()
    return float(value)
