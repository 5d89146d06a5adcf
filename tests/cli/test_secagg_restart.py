"""A coordinator killed (SIGKILL) in the middle of a secagg round and restarted on the same
state (issue 21, "nothing lost on a crash"): a real coordinator process and six agent
processes on 127.0.0.1. The kill lands in round 1 once its share step closed (the bundles
are stored, the sum is not): one agent stands still (SIGSTOP, ldpem.client.faults) with
its masked input of round 1 made and not sent, so that the round cannot close before the
kill however slow the machine; the restarted coordinator replays the round's stored
messages, the agent goes on (SIGCONT) and the round continues where it stopped. The run
ends with exactly the trajectory of its simulation with the same seeds, which an
uninterrupted run has too (tests/cli/test_secagg_federated.py), every holder sent one
masked input per round, and no holder dropped out."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import pytest

from ldpem.client.data import load_records
from ldpem.client.ledger import Ledger
from ldpem.common.planning.simulator import simulate_run
from ldpem.common.protocol import FederatedStreams
from ldpem.common.secagg.steps import HOLDER_STEPS, Step
from ldpem.processes import Child, Processes, free_port, start_coordinator, wait_until
from tests.fedkit import write_gmm_data
from tests.secaggdriver import NAMES, create_run, liar, play_round, spoil, stored_body
from tests.secaggkit import secagg_run

pytestmark = pytest.mark.slow

COUNTS = [300, 320, 340, 360, 380, 400]
K, T_MIN, D, ROUNDS = len(COUNTS), 4, 3, 3
KILLED_ROUND = 1
SEEDS = [300 + i for i in range(K)]
#: The agent that stands still in round KILLED_ROUND, its masked input made and not sent.
HELD = "h5"


def stopped(agent: Child) -> bool:
    """Whether ``agent`` is stopped (SIGSTOP), without reaping it if it exited."""
    assert agent.poll() is None, f"the agent exited with status {agent.returncode}"
    return os.waitid(os.P_PID, agent.pid, os.WSTOPPED | os.WNOHANG | os.WNOWAIT) is not None


def test_a_coordinator_killed_mid_round_continues_the_round(
    procs: Processes, tmp_path: Path
) -> None:
    paths, _ = write_gmm_data(tmp_path, COUNTS, D)
    # A step deadline far longer than the restart: nobody drops out while it is down.
    run = secagg_run(
        procs, tmp_path, COUNTS, d=D, rounds=ROUNDS, seed=3, t_min=T_MIN, round_deadline=90.0
    )
    agents = run.start_agents(paths, seeds=SEEDS, faults={HELD: f"stop-after-mask:{KILLED_ROUND}"})
    held = agents[HELD]
    wait_until(lambda: stopped(held), timeout=240, what=f"{HELD} to stop in round {KILLED_ROUND}")
    run.kill_coordinator()
    at_kill = run.stored()[KILLED_ROUND]
    kinds = [kind for kind, _, _ in at_kill]
    assert "bundle" in kinds and "sum" not in kinds, sorted(set(kinds))  # mid-round
    assert ("masked", HELD) not in [(kind, holder) for kind, holder, _ in at_kill]
    run.start_coordinator(log_level="info")
    held.send_signal(signal.SIGCONT)
    for agent in agents.values():
        assert agent.wait(240) == 0, procs.log(agent)[-3000:]
    assert run.coordinator is not None
    assert "rebuilt from" in procs.log(run.coordinator)

    summary = httpx.get(f"{run.url}/v1/runs/{run.run_id}").json()
    assert (summary["status"], summary["round"]) == ("finished", ROUNDS), summary
    # What was stored before the kill is kept, in order; nothing of it was sent again.
    stored = run.stored()
    assert stored[KILLED_ROUND][: len(at_kill)] == at_kill
    names = sorted(f"h{i}" for i in range(K))
    for t in range(ROUNDS):
        rows = stored[t]
        for step in HOLDER_STEPS:  # one message per holder and step: none asked twice, none lost
            assert sorted(h for k, h, _ in rows if k == step) == names, (t, step)
        [total] = [b for k, _, b in rows if k == "sum"]
        assert total["survivors"] == names
    # The run's result is its simulation's, bit for bit (as an uninterrupted run's is).
    federated = httpx.get(f"{run.url}/v1/runs/{run.run_id}/trajectory").json()["betas"]
    simulated = simulate_run(
        run.params,
        holders=[load_records(p, "gmm") for p in paths],
        beta0=federated[0],
        streams=FederatedStreams(run_id=run.run_id, seeds=SEEDS, run_seed=3),
    )
    assert [[float(v) for v in b] for b in simulated.betas] == federated
    # Each agent masked each round once; its ledger says so.
    for i in range(K):
        ledger = Ledger(tmp_path / f"agent{i}")
        try:
            assert [(e.round, e.status) for e in ledger.entries(run.run_id)] == [
                (t, "masked") for t in range(ROUNDS)
            ]
        finally:
            ledger.close()


def test_a_wrong_share_costs_its_run_a_round_and_a_restart_keeps_the_other_run_going(
    procs: Processes, tmp_path: Path
) -> None:
    """Issue 29, finding 2, with a coordinator process and SIGKILL. Run a: in round 0 h1
    answers the unmasking request with a random share; on 8e54e94 that was a 500 and an
    open round for ever, now the round completes without h1's share and names it. Run a's
    round 1 is then spoilt in the state file while the coordinator is down (the four
    responses stored, h1's and h3's wrong: fewer than t_min verified shares), as 8e54e94
    left it after its 500; run b is in the middle of its round 0. 8e54e94 then failed at start-up
    (SecAggError), taking run b down; now the restarted coordinator loses run a's round 1
    alone, naming h1 and h3 (issue 41: a fault costs the round, not the run, so run a,
    of two rounds, finishes), and run b's round goes on to its sum."""
    db = tmp_path / "coordinator.sqlite"
    port = free_port()
    env = {"LDPEM_TICK": "0.1"}
    child, url = start_coordinator(procs, state=db, port=port, env=env, timeout=120)
    with httpx.Client(base_url=url, timeout=30) as client:
        spoilt, other = create_run(client, "a"), create_run(client, "b")
        played = play_round(spoilt, 0, spoilt.inputs(1), alter=liar("h1", "h0"))
        assert played.statuses == [200] * (len(HOLDER_STEPS) * len(NAMES))
        assert (spoilt.summary()["status"], spoilt.summary()["round"]) == ("running", 1)
        later = play_round(spoilt, 1, spoilt.inputs(3), until=Step.SIGNATURE)
        requests = {n: spoilt.get(1, n, "unmask-request").json() for n in NAMES}
        begun = play_round(other, 0, other.inputs(2), until=Step.SHARES)
    child.send_signal(signal.SIGKILL)
    child.wait(30)
    assert list(stored_body(tmp_path, spoilt.run_id, 0, "sum")["faulty"]) == ["h1"]
    spoil(db, spoilt, 1, later, requests, liars=("h1", "h3"))

    child, url = start_coordinator(
        procs, state=db, port=port, env=env, timeout=120, name="coordinator-2"
    )
    with httpx.Client(base_url=url, timeout=30) as client:
        spoilt.client = other.client = client
        summary = spoilt.summary()
        assert summary["status"] == "finished", summary
        played = play_round(other, 0, other.inputs(2), holders=begun.holders)
        assert played.statuses == [200] * (len(HOLDER_STEPS) * len(NAMES))
        assert (other.summary()["status"], other.summary()["round"]) == ("running", 1)
    lost = stored_body(tmp_path, spoilt.run_id, 1, "lost")
    assert (lost["cause"], lost["culprits"]) == ("faulty", ["h1", "h3"]), lost
    assert "wrong shares came from 'h1', 'h3'" in lost["reason"]
    assert f"run {spoilt.run_id} round 1 lost, faulty (h1, h3)" in procs.log(child)
