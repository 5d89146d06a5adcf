"""A real federated secagg run with dropouts (issue 21): a coordinator and 20 agent
processes, three of them killed (SIGKILL) in the middle of round 1, one after it advertised
its keys, one after it shared them, one after it sent its masked input. The per-step
deadlines close each step without them, the run finishes, and then the test plays the
attacker on the coordinator's store (``secagg_messages``): it reconstructs every secret it
holds t_min shares of, removes every mask it can, and computes no holder's report.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import pytest

from ldpem.common.protocol import holder_mechanism
from ldpem.common.secagg import (
    EncryptedShares,
    KeyAdvertisement,
    MaskedInput,
    Roster,
    UnmaskRequest,
    UnmaskResponse,
)
from ldpem.common.secagg.runvalues import grid_of, signed_sum, to_residues
from ldpem.common.wire import PublicParameters
from ldpem.processes import Processes, free_port, start_coordinator
from tests.cli.secaggkit import hospitals, keys_and_roster, start_agent
from tests.common.secagg.test_aggregator_view import View
from tests.fedkit import cli_create_run, write_gmm_data

pytestmark = pytest.mark.slow

K, T_MIN, D, ROUNDS = 20, 11, 3, 3
#: Killed in round 1 once the coordinator stored this message of theirs.
KILLS = {"h17": "advertise", "h18": "shares", "h19": "masked"}
KILLED_ROUND = 1


def stored(db: Path, run_id: str) -> dict[int, list[tuple[str, str, dict[str, Any]]]]:
    """Round → (kind, holder, body) of every message the coordinator stored, in order."""
    with sqlite3.connect(db) as connection:
        rows = connection.execute(
            "SELECT t, kind, holder, body FROM secagg_messages WHERE run_id = ? ORDER BY t, seq",
            (run_id,),
        ).fetchall()
    out: dict[int, list[tuple[str, str, dict[str, Any]]]] = defaultdict(list)
    for t, kind, holder, body in rows:
        out[t].append((kind, holder, json.loads(body)))
    return out


def kill_on_cue(procs: Processes, agents: dict[str, Any], db: Path, run_id: str) -> list[str]:
    """SIGKILL each agent of KILLS as soon as its cue is stored; the order they died in."""
    died: list[str] = []
    deadline = time.monotonic() + 150
    while len(died) < len(KILLS) and time.monotonic() < deadline:
        with sqlite3.connect(db, timeout=5) as connection:
            rows = connection.execute(
                "SELECT kind, holder FROM secagg_messages WHERE run_id = ? AND t = ?",
                (run_id, KILLED_ROUND),
            ).fetchall()
        for kind, holder in rows:
            if KILLS.get(holder) == kind and holder not in died:
                agents[holder].send_signal(signal.SIGKILL)
                died.append(holder)
        time.sleep(0.01)
    return died


def test_twenty_agents_three_killed_mid_round(procs: Processes, tmp_path: Path) -> None:
    counts = [60 + 3 * i for i in range(K)]
    paths, _ = write_gmm_data(tmp_path, counts, D)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    db = tmp_path / "coordinator.sqlite"
    start_coordinator(procs, state=db, port=port, env={"LDPEM_TICK": "0.1"})
    _, _, roster_json = keys_and_roster(tmp_path, K)
    created = cli_create_run(
        tmp_path,
        url,
        [],
        hospitals=hospitals(counts),
        d=D,
        rounds=ROUNDS,
        epsilon=1.0,
        mechanism="secagg",
        roster=roster_json,
        t_min=T_MIN,
        round_deadline=8.0,
        forecast=False,
    )
    run_id = created["run_id"]
    params = PublicParameters.model_validate(created["params"])
    agents = {
        f"h{i}": start_agent(
            procs, tmp_path, url, i, p, tmp_path / f"h{i}.key", tmp_path / "roster.json"
        )
        for i, p in enumerate(paths)
    }
    died = kill_on_cue(procs, agents, db, run_id)
    assert sorted(died) == sorted(KILLS), died
    for name, agent in agents.items():
        if name not in KILLS:
            assert agent.wait(150) == 0, procs.log(agent)[-3000:]
    summary = httpx.get(f"{url}/v1/runs/{run_id}").json()
    assert summary["status"] == "finished", summary

    messages = stored(db, run_id)
    roster = Roster.from_json(json.dumps(roster_json))
    mechanism = holder_mechanism(
        params,
        records=params.records_per_round,
        epsilon=params.epsilon,
        delta=params.delta,
        accounting=params.accounting,
    )
    grid, bits = grid_of(mechanism), params.modulus_bits
    assert bits is not None
    for t in range(ROUNDS):
        rows = messages[t]
        request = UnmaskRequest.from_dict(next(b for k, _, b in rows if k == "unmask_request"))
        if t == KILLED_ROUND:
            # h17 advertised only, h18 shared keys but never masked: dropped; h19 masked:
            # a survivor that never answered the unmasking request.
            assert "h18" in request.dropped and "h19" in request.survivors
            assert "h17" not in (*request.survivors, *request.dropped)
        if t > KILLED_ROUND:
            assert not set(KILLS) & {h for k, h, _ in rows if k == "advertise"}
        view = View(
            _parameters(rows),
            roster,
            {h: KeyAdvertisement.from_dict(b) for k, h, b in rows if k == "advertise"},
            {h: EncryptedShares.from_dict(b) for k, h, b in rows if k == "shares"},
            {h: MaskedInput.from_dict(b) for k, h, b in rows if k == "masked"},
            {h: UnmaskResponse.from_dict(b) for k, h, b in rows if k == "unmask"},
        )
        truth = {
            name: [int(v) for v in to_residues(json.loads(body)["total"], grid, bits)]
            for name, body in reports(tmp_path, run_id, t).items()
        }
        # The coordinator's sum is the survivors' reports' sum (correctness) …
        total = next(b for k, _, b in rows if k == "sum")["total"]
        residues = [sum(truth[n][j] for n in request.survivors) for j in range(D)]
        assert total == [grid * v for v in signed_sum(residues, bits)]
        # … and it holds one kind of share per holder: seeds of the survivors, masking
        # keys of the dropped, never both …
        for name in view.adverts:
            kinds = {kind for kind in "bs" if view.shares_held[kind, name]}
            assert len(kinds) <= 1, (t, name, kinds)
        assert set(view.seeds) == set(request.survivors)
        assert set(view.keys) == set(request.dropped)
        # … so removing every mask it can compute leaves each masked input masked.
        for target in view.masked:
            guess, left = view.best_guess(target)
            assert left, (t, target)
            assert guess != truth[target], (t, target)


def _parameters(rows: list[tuple[str, str, dict[str, Any]]]) -> Any:
    return KeyAdvertisement.from_dict(next(b for k, _, b in rows if k == "advertise")).parameters


def reports(tmp_path: Path, run_id: str, t: int) -> dict[str, str]:
    """Each agent's persisted report of round t (the truth the attacker is after)."""
    out = {}
    for i in range(K):
        ledger = tmp_path / f"agent{i}" / "ledger.sqlite"
        with sqlite3.connect(ledger) as connection:
            row = connection.execute(
                "SELECT body FROM rounds WHERE run_key = ? AND round = ?", (run_id, t)
            ).fetchone()
        if row is not None and row[0]:
            out[f"h{i}"] = bytes(row[0]).decode()
    return out
