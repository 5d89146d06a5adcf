"""A coordinator restarted in the middle of a secure-aggregation round continues it from its
stored messages (``SecAggRounds._replay``): the steps closed before stay closed with the
same outputs, the holders that sent a step are not asked for it again (their retries are
accepted, a different message is refused), and the round's sum is the sum of the inputs,
stored once. In-process (the app on its state file, closed and opened again); the same
with real processes and SIGKILL is tests/cli/test_secagg_restart.py."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from ldpem.common.secagg import (
    ConsistencyCheck,
    Holder,
    ParticipantList,
    Roster,
    RoundParameters,
    ShareBundle,
    UnmaskRequest,
    generate_signing_key,
    public_key_bytes,
)
from ldpem.common.secagg.runvalues import grid_of, run_shares_mechanism, signed_sum
from ldpem.common.wire import PublicParameters
from ldpem.server.app import create_app
from tests.fedkit import TOKENS, admin_headers, run_request, settings

K, T_MIN, D = 4, 3, 3
NAMES = [f"h{i}" for i in range(K)]
#: Where the coordinator is restarted: after the first two holders' message of a step
#: ("-partial"), or once the step closed.
POINTS = [
    f"{step}{part}"
    for step in ("advertise", "shares", "masked", "signature", "unmask")
    for part in ("-partial", "")
    if f"{step}{part}" != "unmask"
]


class Coordinator:
    """The app on ``tmp_path``'s state file; ``restart`` closes it and opens a new one."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.restarts = 0
        self._stack = contextlib.ExitStack()
        self.client = self._open()

    def _open(self) -> TestClient:
        app = create_app(settings(self.tmp_path, tick=0.05))
        return self._stack.enter_context(TestClient(app))

    def restart(self) -> None:
        self._stack.close()
        self._stack = contextlib.ExitStack()
        self.client = self._open()
        self.restarts += 1

    def close(self) -> None:
        self._stack.close()

    def post(self, run_id: str, name: str, step: str, message: Any) -> int:
        response = self.client.post(
            f"/v1/runs/{run_id}/rounds/0/secagg/{step}",
            json=message.to_dict(),
            headers={"Authorization": f"Bearer {TOKENS[NAMES.index(name)]}"},
        )
        return int(response.status_code)

    def get(self, run_id: str, name: str, what: str) -> dict[str, Any]:
        response = self.client.get(
            f"/v1/runs/{run_id}/rounds/0/secagg/{what}",
            params={"wait": 5},
            headers={"Authorization": f"Bearer {TOKENS[NAMES.index(name)]}"},
        )
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[Coordinator]:
    c = Coordinator(tmp_path)
    try:
        yield c
    finally:
        c.close()


KEYS = {n: generate_signing_key() for n in NAMES}


def create(c: Coordinator) -> tuple[str, PublicParameters, dict[str, Holder]]:
    keys = KEYS
    roster = Roster({n: public_key_bytes(key) for n, key in keys.items()})
    request = run_request(
        hospitals=K,
        records=100,
        d=D,
        rounds=2,
        mechanism="secagg",
        t_min=T_MIN,
        roster=json.loads(roster.to_json()),
        round_deadline=600.0,  # no step closes at a deadline here
    )
    response = c.client.post("/v1/runs", json=request, headers=admin_headers())
    assert response.status_code == 201, response.text
    created = response.json()
    params = PublicParameters.model_validate(created["params"])
    assert params.modulus_bits is not None
    assert params.colluders == 1  # the default: ⌊4/3⌋ = 1 < 2·3 − 4
    parameters = RoundParameters(
        created["run_id"], 0, K, T_MIN, params.modulus_bits, params.colluders
    )
    holders = {n: Holder(n, roster, keys[n], parameters, min_honest=1) for n in NAMES}
    return created["run_id"], params, holders


def play_round(
    c: Coordinator,
    run_id: str,
    holders: dict[str, Holder],
    inputs: dict[str, list[int]],
    at: Callable[[str, dict[str, list[tuple[str, Any]]]], None],
) -> None:
    """Round 0, every holder through every step; ``at(point, sent)`` at each point of
    POINTS, with the messages sent so far per step."""
    sent: dict[str, list[tuple[str, Any]]] = {}

    def step(name: str, messages: dict[str, Any]) -> None:
        sent[name] = []
        for i, (holder, message) in enumerate(messages.items()):
            assert c.post(run_id, holder, name, message) == 200
            sent[name].append((holder, message))
            if i == 1:
                at(f"{name}-partial", sent)
        if name != "unmask":
            at(name, sent)

    step("advertise", {n: h.advertise() for n, h in holders.items()})
    lists = {n: ParticipantList.from_dict(c.get(run_id, n, "participants")) for n in holders}
    step("shares", {n: h.share_keys(lists[n]) for n, h in holders.items()})
    bundles = {n: ShareBundle.from_dict(c.get(run_id, n, "bundle")) for n in holders}
    step("masked", {n: h.masked_input(bundles[n], inputs[n]) for n, h in holders.items()})
    order = next(iter(holders.values())).roster.names
    checks = {
        n: ConsistencyCheck.from_dict(c.get(run_id, n, "consistency-check"), order) for n in holders
    }
    step("signature", {n: h.sign_survivors(checks[n]) for n, h in holders.items()})
    requests = {
        n: UnmaskRequest.from_dict(c.get(run_id, n, "unmask-request"), order) for n in holders
    }
    step("unmask", {n: h.unmask(requests[n]) for n, h in holders.items()})


def stored(tmp_path: Path, run_id: str) -> list[tuple[str, str, str]]:
    with contextlib.closing(sqlite3.connect(tmp_path / "coordinator.sqlite")) as db:
        rows = db.execute(
            "SELECT kind, holder, body FROM secagg_messages WHERE run_id = ? AND t = 0 "
            "ORDER BY seq",
            (run_id,),
        ).fetchall()
    return [(str(k), str(h), str(b)) for k, h, b in rows]


def round_inputs(params: PublicParameters) -> dict[str, list[int]]:
    """Small signed integers (grid units) as residues mod 2^bits."""
    assert params.modulus_bits is not None
    rng = np.random.default_rng(7)
    return {
        n: [int(v) % 2**params.modulus_bits for v in rng.integers(-500, 500, size=D)] for n in NAMES
    }


@pytest.mark.parametrize("point", POINTS)
def test_a_restart_at_any_point_of_the_round_continues_it(
    coordinator: Coordinator, tmp_path: Path, point: str
) -> None:
    run_id, params, holders = create(coordinator)
    inputs = round_inputs(params)
    before: list[tuple[str, str, str]] = []

    def at(here: str, sent: dict[str, list[tuple[str, Any]]]) -> None:
        if here != point:
            return
        before.extend(stored(tmp_path, run_id))
        coordinator.restart()
        # The holders that sent a step are answered as before: their retry is accepted …
        for step, messages in sent.items():
            for holder, message in messages:
                assert coordinator.post(run_id, holder, step, message) == 200, (step, holder)
        # … and a different message of theirs for the open step is refused.
        step, messages = list(sent.items())[-1]
        if step == "advertise" and messages:
            holder = messages[0][0]
            other = Holder(
                holder,
                holders[holder].roster,
                KEYS[holder],
                holders[holder].parameters,
                min_honest=1,
            )
            assert coordinator.post(run_id, holder, "advertise", other.advertise()) == 409

    play_round(coordinator, run_id, holders, inputs, at)
    assert coordinator.restarts == 1
    after = stored(tmp_path, run_id)
    # Nothing stored before the restart was stored again or changed; every holder's message
    # of each step is stored once.
    assert after[: len(before)] == before
    steps = ("advertise", "shares", "masked", "signature", "unmask")
    kinds = [(k, h) for k, h, _ in after if k in steps]
    assert sorted(kinds) == sorted((k, n) for k in steps for n in NAMES)
    assert [k for k, _, _ in after].count("participants") == 1
    assert [k for k, _, _ in after].count("consistency_check") == 1
    assert [k for k, _, _ in after].count("unmask_request") == 1
    assert [k for k, _, _ in after].count("sum") == 1
    # The round closed with the sum of the inputs.
    assert params.modulus_bits is not None
    grid = grid_of(run_shares_mechanism(params))
    residues = [sum(inputs[n][j] for n in NAMES) for j in range(D)]
    expected = [grid * v for v in signed_sum(residues, params.modulus_bits)]
    total = json.loads(next(b for k, _, b in after if k == "sum"))["total"]
    assert total == expected
    run = coordinator.client.get(f"/v1/runs/{run_id}").json()
    assert (run["status"], run["round"]) == ("running", 1)


def test_a_step_complete_but_not_closed_closes_at_the_restart(
    coordinator: Coordinator, tmp_path: Path
) -> None:
    """Killed after the last share was stored and before the bundles were: the restart
    closes the step itself, with the same bundles (the aggregator draws no randomness)."""
    run_id, params, holders = create(coordinator)
    inputs = round_inputs(params)
    removed: list[tuple[str, str, str]] = []

    def at(here: str, sent: dict[str, list[tuple[str, Any]]]) -> None:
        if here != "shares":
            return
        coordinator.close()
        with contextlib.closing(sqlite3.connect(tmp_path / "coordinator.sqlite")) as db:
            removed.extend(
                db.execute(
                    "SELECT kind, holder, body FROM secagg_messages WHERE kind = 'bundle' "
                    "ORDER BY seq"
                ).fetchall()
            )
            # The step's outputs and its closing record are one transaction: both go.
            db.execute(
                "DELETE FROM secagg_messages WHERE kind = 'bundle' OR (kind = 'closed' "
                "AND json_extract(body, '$.step') = 'shares')"
            )
            db.commit()
        coordinator.restart()

    play_round(coordinator, run_id, holders, inputs, at)
    assert len(removed) == K
    assert [r for r in stored(tmp_path, run_id) if r[0] == "bundle"] == removed
    run = coordinator.client.get(f"/v1/runs/{run_id}").json()
    assert run["round"] == 1
