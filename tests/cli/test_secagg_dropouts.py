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
from pathlib import Path
from typing import Any

import httpx
import pytest

from ldpem.common.secagg import (
    EncryptedShares,
    KeyAdvertisement,
    MaskedInput,
    Roster,
    UnmaskRequest,
    UnmaskResponse,
)
from ldpem.common.secagg.runvalues import grid_of, run_shares_mechanism, signed_sum
from ldpem.processes import Processes
from tests.common.secagg.test_aggregator_view import View
from tests.fedkit import write_gmm_data
from tests.secaggkit import Message, SecAggRun, secagg_run

pytestmark = pytest.mark.slow

K, T_MIN, D, ROUNDS = 20, 11, 3, 3
#: Killed in round 1 once the coordinator stored this message of theirs.
KILLS = {"h17": "advertise", "h18": "shares", "h19": "masked"}
KILLED_ROUND = 1


def kill_on_cue(run: SecAggRun, agents: dict[str, Any]) -> list[str]:
    """SIGKILL each agent of KILLS as soon as its cue is stored; the order they died in."""
    died: list[str] = []
    deadline = time.monotonic() + 150
    while len(died) < len(KILLS) and time.monotonic() < deadline:
        with sqlite3.connect(run.db, timeout=5) as connection:
            rows = connection.execute(
                "SELECT kind, holder FROM secagg_messages WHERE run_id = ? AND t = ?",
                (run.run_id, KILLED_ROUND),
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
    run = secagg_run(procs, tmp_path, counts, d=D, rounds=ROUNDS, t_min=T_MIN, round_deadline=8.0)
    url, run_id, params = run.url, run.run_id, run.params
    roster_json = json.loads((tmp_path / "roster.json").read_text())
    agents = run.start_agents(paths)
    died = kill_on_cue(run, agents)
    assert sorted(died) == sorted(KILLS), died
    for name, agent in agents.items():
        if name not in KILLS:
            assert agent.wait(150) == 0, procs.log(agent)[-3000:]
    summary = httpx.get(f"{url}/v1/runs/{run_id}").json()
    assert summary["status"] == "finished", summary

    messages = run.stored()
    roster = Roster.from_json(json.dumps(roster_json))
    mechanism = run_shares_mechanism(params)
    grid, bits = grid_of(mechanism), params.modulus_bits
    assert bits is not None
    for t in range(ROUNDS):
        rows = messages[t]
        unmask_request = next(b for k, _, b in rows if k == "unmask_request")
        request = UnmaskRequest.from_dict(unmask_request, roster.names)
        if t == KILLED_ROUND:
            # Each killed holder is classed by the last message the coordinator stored of
            # it: advertised only, in neither list; shared keys but never masked, dropped;
            # masked, a survivor (that may never have answered the unmasking request).
            # Usually that is its cue (h17 advertise, h18 shares, h19 masked); but a holder
            # whose message closed its step gets the answer in the same response and may
            # send the next one before the SIGKILL lands (seen once in CI, h17).
            for name in KILLS:
                sent = {k for k, h, _ in rows if h == name}
                assert KILLS[name] in sent, (name, sent)
                if "masked" in sent:
                    assert name in request.survivors, (name, sent)
                elif "shares" in sent:
                    assert name in request.dropped, (name, sent)
                else:
                    assert name not in (*request.survivors, *request.dropped), (name, sent)
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
        truth = {name: run.residues(body) for name, body in run.reports(t).items()}
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


def _parameters(rows: list[Message]) -> Any:
    return KeyAdvertisement.from_dict(next(b for k, _, b in rows if k == "advertise")).parameters
