"""Stragglers and dropouts, handled by quorum and deadline as configured; the run's status
(``/rounds`` reporters, ``/participation``) says which rounds went without whom."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from ldpem.common.wire import PublicParameters, expected_round_count
from ldpem.processes import Processes, wait_until
from tests.fedkit import TOKENS, replay, run_request
from tests.reliability.kit import AGENT_SEED, Cluster, gmm_cluster

COUNTS = [200, 201, 202]


def _create(cluster: Cluster, rounds: int, **extra: Any) -> dict[str, Any]:
    request = run_request(d=3, rounds=rounds, **extra)
    request["hospitals"] = [
        {"name": f"h{i}", "records": c, "token": TOKENS[i]} for i, c in enumerate(COUNTS)
    ]
    return cluster.create(request)


def _consistent(cluster: Cluster, run_id: str, rounds: int) -> dict[str, list[int]]:
    """Each round's count is that of its reporters, and /participation agrees with /rounds;
    returns the rounds each hospital reported in."""
    summary = cluster.get(f"/v1/runs/{run_id}/rounds")
    reported: dict[str, list[int]] = {f"h{i}": [] for i in range(len(COUNTS))}
    for r in summary:
        assert len(set(r["reporters"])) == len(r["reporters"])
        for name in r["reporters"]:
            reported[name].append(r["round"])
        assert r["count"] == sum(
            expected_round_count(COUNTS[int(n[1:])], rounds, r["round"]) for n in r["reporters"]
        )
    participation = cluster.get(f"/v1/runs/{run_id}/participation")
    assert {p["hospital"]: sorted(p["rounds_reported"]) for p in participation} == reported
    return reported


def test_a_hospital_that_never_reports_is_left_out_at_each_deadline(
    procs: Processes, tmp_path: Path
) -> None:
    cluster, paths = gmm_cluster(procs, tmp_path, COUNTS)
    rounds = 4
    created = _create(cluster, rounds, quorum=2, round_deadline=1.0)
    run_id = created["run_id"]
    agents = [cluster.agent(i, paths[i], wait=2) for i in (0, 1)]  # h2 never starts
    for process in agents:
        assert process.wait(300) == 0, procs.log(process)[-3000:]
    run = cluster.get(f"/v1/runs/{run_id}")
    assert (run["status"], run["round"]) == ("finished", rounds)
    reported = _consistent(cluster, run_id, rounds)
    assert reported == {"h0": [0, 1, 2, 3], "h1": [0, 1, 2, 3], "h2": []}
    # The estimate is exactly that of the two hospitals that took part.
    params = PublicParameters.model_validate(created["params"])
    betas = cluster.get(f"/v1/runs/{run_id}/trajectory")["betas"]
    assert betas == replay(
        params,
        run_id,
        betas[0],
        paths[:2],
        [AGENT_SEED, AGENT_SEED + 1],
        epsilon=params.epsilon,
        delta=params.delta,
    )


def test_a_hospital_that_disappears_mid_run(procs: Processes, tmp_path: Path) -> None:
    cluster, paths = gmm_cluster(procs, tmp_path, COUNTS)
    rounds = 5
    # A deadline long enough for the three agents to start on a loaded machine.
    created = _create(cluster, rounds, quorum=2, round_deadline=4.0)
    run_id = created["run_id"]
    agents = [cluster.agent(i, paths[i], wait=2) for i in (0, 1)]
    leaver = cluster.agent(2, paths[2], wait=2, env={"LDPEM_AGENT_FAULT": "kill-after-persist:2"})
    assert leaver.wait(300) == -9, procs.log(leaver)[-3000:]
    for process in agents:
        assert process.wait(300) == 0, procs.log(process)[-3000:]
    run = cluster.get(f"/v1/runs/{run_id}")
    assert (run["status"], run["round"]) == ("finished", rounds)
    reported = _consistent(cluster, run_id, rounds)
    assert reported["h0"] == reported["h1"] == list(range(rounds))
    # h2 persisted round 2 and died before sending it: rounds 2… went without it.
    assert set(reported["h2"]) <= {0, 1}
    assert 2 not in reported["h2"]


def _h2_absent(
    procs: Processes, tmp_path: Path, rounds: int, **request: Any
) -> tuple[Cluster, list[Path], str, list[subprocess.Popen[bytes]]]:
    """A run of h0, h1, h2 with quorum 3 (``request``: its deadline and what a round short
    of it does) in which only the agents of h0 and h1 start: the cluster, the records,
    the run's id and the two agents."""
    cluster, paths = gmm_cluster(procs, tmp_path, COUNTS)
    run_id = _create(cluster, rounds, quorum=3, **request)["run_id"]
    return cluster, paths, run_id, [cluster.agent(i, paths[i], wait=2) for i in (0, 1)]


def test_short_of_quorum_with_on_short_fail_the_run_fails_and_says_why(
    procs: Processes, tmp_path: Path
) -> None:
    cluster, _, run_id, agents = _h2_absent(procs, tmp_path, 3, round_deadline=1.0, on_short="fail")
    for process in agents:
        assert process.wait(300) == 2, procs.log(process)[-3000:]
        assert f"run {run_id} failed" in procs.log(process)
    run = cluster.get(f"/v1/runs/{run_id}")
    assert run["status"] == "failed"
    assert "short of the quorum 3" in run["reason"]
    reported = _consistent(cluster, run_id, 3)
    assert reported["h2"] == []


def test_short_of_quorum_with_on_short_extend_waits_for_the_straggler(
    procs: Processes, tmp_path: Path
) -> None:
    cluster, paths, run_id, agents = _h2_absent(
        procs, tmp_path, 2, round_deadline=0.5, on_short="extend"
    )
    # Several deadlines pass short of quorum: round 0 stays open, extended each time.
    first = cluster.get(f"/v1/runs/{run_id}/rounds")[0]["deadline"]
    wait_until(
        lambda: cluster.get(f"/v1/runs/{run_id}/rounds")[0]["deadline"] > first + 1.0,
        timeout=120,
        what="an extended deadline",
    )
    assert cluster.get(f"/v1/runs/{run_id}")["round"] == 0
    agents.append(cluster.agent(2, paths[2], wait=2))  # the straggler arrives
    for process in agents:
        assert process.wait(300) == 0, procs.log(process)[-3000:]
    assert _consistent(cluster, run_id, 2) == {"h0": [0, 1], "h1": [0, 1], "h2": [0, 1]}
