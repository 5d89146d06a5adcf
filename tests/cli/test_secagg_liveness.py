"""Liveness on the expander through the real coordinator (issue 41, finding 3 and "Liveness
on every topology"; docs/SECAGG_GRAPH.md, "The attestation"): a coordinator process, a
K = 300 expander run created by ``ldpem run create`` (k = 130, t_k = 70, committee 92 of
116, T = 270), two real ``ldpem client`` processes (h0, h1) and the 298 other hospitals
played in this process by the library's ``Holder`` over HTTP (tests/secaggdriver.py's
way: 300 agent processes would not fit the test machine).

* Round 0: h0 sends its masked input, then is SIGKILLed before it signs the survivor set
  (``LDPEM_AGENT_FAULT=kill-before-sign:0``) and stays dead. The signature step closes at
  its deadline with the 299 signers (under ``on_short`` "extend", which at 802cc97
  extended it for ever), h0's neighbours release its seed share against its masked-with
  attestation, and the sum is exactly Σ of the 300 inputs, h0's persisted report included.
* Round 1 (h0 is not waited for): h1 is SIGKILLed at the same point and restarted on its
  state. The restarted agent tells the coordinator (a fresh advertisement, 409), which
  counts it out at once: the signature step closes when the others signed, not at its
  deadline, and the sum is exactly Σ of the 299 inputs, h1's included. The run finishes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from ldpem.common.secagg import Holder, Roster, signing_key_from_pem
from ldpem.common.secagg.runvalues import (
    grid_of,
    round_parameters,
    run_expander,
    run_shares_mechanism,
    signed_sum,
)
from ldpem.processes import Processes, wait_until
from tests.fedkit import write_gmm_data
from tests.secaggdriver import DrivenRun, play_round
from tests.secaggkit import SecAggRun, secagg_run, start_agent, tokens

pytestmark = pytest.mark.slow

K, D, ROUNDS, RECORDS = 300, 3, 2, 100
#: Each step's deadline: long enough for this process to play 298 holders' step on a
#: loaded 2-core machine, so that only the signature step of round 0 reaches it.
DEADLINE = 60.0
AGENTS = ("h0", "h1")
DRIVEN = [f"h{i}" for i in range(2, K)]


def driven_run(run: SecAggRun, client: httpx.Client) -> DrivenRun:
    names = tokens(K)
    return DrivenRun(client, run.run_id, run.params, {f"h{i}": names[i] for i in range(K)})


def driven_holders(run: SecAggRun, t: int) -> dict[str, Holder]:
    parameters = round_parameters(run.params, run.run_id, t)
    assert parameters.expander and parameters.k == K
    roster = _roster(run)
    return {
        n: Holder(
            n,
            roster,
            signing_key_from_pem((run.tmp_path / f"{n}.key").read_bytes()),
            parameters,
            min_honest=1,
        )
        for n in DRIVEN
    }


def _roster(run: SecAggRun) -> Roster:
    return Roster.from_json((run.tmp_path / "roster.json").read_text())


def play(
    drive: DrivenRun, t: int, holders: dict[str, Holder], values: dict[str, list[int]]
) -> None:
    """Round t for the driven holders, each step's answer waited for (the agents answer
    in their own processes)."""
    played = play_round(drive, t, values, holders=holders, within=4 * DEADLINE)
    assert set(played.statuses) == {200}


def stored(run: SecAggRun, t: int) -> list[tuple[str, str, dict[str, Any]]]:
    return run.stored().get(t, [])


def agent_residues(run: SecAggRun, name: str, t: int) -> list[int]:
    """The residues of ``name``'s persisted report of round t (what it masked)."""
    report = run.report(name, t)
    assert report is not None, (name, t)
    return run.residues(report)


def check_sum(run: SecAggRun, t: int, values: dict[str, list[int]], agents: list[str]) -> None:
    bits = run.params.modulus_bits
    assert bits is not None
    rows = stored(run, t)
    body = next(b for k, _, b in rows if k == "sum")
    summed = {**values, **{a: agent_residues(run, a, t) for a in agents}}
    assert body["survivors"] == sorted(summed)
    residues = [sum(v[j] for v in summed.values()) for j in range(D)]
    grid = grid_of(run_shares_mechanism(run.params))
    assert body["total"] == [grid * v for v in signed_sum(residues, bits)]


def closing(run: SecAggRun, t: int, step: str) -> dict[str, Any]:
    found: dict[str, Any] = next(
        b for k, _, b in stored(run, t) if k == "closed" and b["step"] == step
    )
    return found


def inputs(run: SecAggRun, seed: int) -> dict[str, list[int]]:
    bits = run.params.modulus_bits
    assert bits is not None
    rng = np.random.default_rng(seed)
    return {n: [int(v) % 2**bits for v in rng.integers(-20, 20, size=D)] for n in DRIVEN}


def test_an_expander_round_closes_without_a_killed_or_restarted_signer(
    procs: Processes, tmp_path: Path
) -> None:
    run = secagg_run(
        procs,
        tmp_path,
        [RECORDS] * K,
        d=D,
        rounds=ROUNDS,
        seed=3,
        secagg_topology="expander",
        round_deadline=DEADLINE,
        on_short="extend",
    )
    expander = run_expander(K, K // 3, 0.1, 2)
    params = run.params
    assert params.graph is not None and params.graph.topology == "expander"
    assert (params.graph.neighbours, params.t_min) == (expander.k, expander.threshold)
    data, _ = write_gmm_data(tmp_path, [RECORDS] * len(AGENTS), D)

    def agent(i: int, fault: str | None) -> Any:
        return start_agent(
            procs,
            tmp_path,
            run.url,
            i,
            data[i],
            tmp_path / f"h{i}.key",
            tmp_path / "roster.json",
            "--seed",
            str(40 + i),
            env={"LDPEM_AGENT_FAULT": fault},
        )

    killed = agent(0, "kill-before-sign:0")
    restarted = agent(1, "kill-before-sign:1")
    with httpx.Client(base_url=run.url, timeout=4 * DEADLINE) as client:
        drive = driven_run(run, client)
        # Round 0: h0 masks and dies before signing; the step closes at its deadline.
        values = inputs(run, 0)
        play(drive, 0, driven_holders(run, 0), values)
        assert killed.wait(60) == -9
        wait_until(lambda: drive.summary()["round"] == 1, timeout=120, what="round 0 to close")
        signature = closing(run, 0, "signature")
        assert (signature["by"], signature["missing"]) == ("deadline", ["h0"])
        check_sum(run, 0, values, ["h0", "h1"])
        # Round 1: h1 masks, dies before signing and is restarted: counted out at once.
        values = inputs(run, 1)
        holders = driven_holders(run, 1)
        restart: list[Any] = []

        def h1_restarted() -> bool:
            """Restart h1 once it died (SIGKILL before signing); whether it was."""
            if not restart and restarted.poll() is not None:
                assert restarted.returncode == -9
                restart.append(agent(1, None))
            return bool(restart)

        # The driven holders are played step by step; h1 is restarted as soon as it died
        # (after its masked input, while the others sign).
        original = drive.answer

        def answer(t: int, name: str, what: str, *, within: float = 60.0) -> dict[str, Any]:
            if what == "unmask-request":
                wait_until(h1_restarted, timeout=120, what="h1 to die before signing")
            return original(t, name, what, within=within)

        drive.answer = answer  # type: ignore[method-assign]
        play(drive, 1, holders, values)
        assert restart, "h1 was never restarted"
        wait_until(
            lambda: drive.summary()["status"] == "finished", timeout=120, what="the run to finish"
        )
        signature = closing(run, 1, "signature")
        assert signature["by"] == "everyone" and signature["missing"] == []
        assert "h0" not in signature["waited_for"] and "h1" not in signature["waited_for"]
        assert [h for k, h, _ in stored(run, 1) if k == "restarted"] == ["h1"]
        check_sum(run, 1, values, ["h1"])
        assert restart[0].wait(120) == 0, procs.log(restart[0])[-3000:]
    log = procs.log(restart[0])
    assert "the coordinator was told this agent restarted" in log
