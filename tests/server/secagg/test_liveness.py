"""A survivor that masked and never signs, through the real coordinator on the SecAgg+
graph (issue 41, finding 3; docs/SECAGG_GRAPH.md, "The attestation"). In-process (the app
on its state file, as tests/server/secagg/test_graph.py), the library's ``Holder`` playing
each hospital.

* It restarted (a fresh ``Holder`` advertises again, as a restarted agent does,
  ``client.secagg.announce_restart``): the coordinator answers 409, counts it out at once,
  and the signature step closes as soon as everyone else signed, without waiting for its
  deadline, also when the coordinator itself restarts in between (the ``restarted`` row is
  replayed). An advertisement not signed by its key changes nothing.
* It went silent (a crash): under ``on_short`` "extend" the step closes at its deadline
  instead of being extended for ever.

Either way its input is in the sum (it is a survivor: its neighbours release its seed
share against its masked-with attestation), exactly Σ of the 16 inputs, and the run goes
on to round 1."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from ldpem.common.secagg import (
    ConsistencyCheck,
    Holder,
    Roster,
    UnmaskRequest,
    generate_signing_key,
    public_key_bytes,
)
from ldpem.common.secagg.runvalues import (
    grid_of,
    round_parameters,
    run_shares_mechanism,
    signed_sum,
)
from ldpem.common.secagg.steps import Step
from tests.secaggdriver import DrivenRun, InProcessCoordinator, create_run, play_round, stored

K, C, D = 16, 2, 3
NAMES = [f"g{i:02d}" for i in range(K)]
KEYS = {n: generate_signing_key() for n in NAMES}
ROSTER = Roster({n: public_key_bytes(key) for n, key in KEYS.items()})
#: The survivor that masks and never signs.
SILENT = "g06"


def create(c: InProcessCoordinator, *, deadline: float, on_short: str) -> DrivenRun:
    return create_run(
        c.client,
        "live",
        roster=ROSTER,
        shares={"secagg_topology": "graph", "colluders": C, "dropout_share": 0.1},
        round_deadline=deadline,
        on_short=on_short,
    )


def holders(run: DrivenRun, t: int) -> dict[str, Holder]:
    parameters = round_parameters(run.params, run.run_id, t)
    assert parameters.graph and parameters.k == K
    return {n: Holder(n, ROSTER, KEYS[n], parameters, min_honest=1) for n in NAMES}


def inputs(run: DrivenRun) -> dict[str, list[int]]:
    bits = run.params.modulus_bits
    assert bits is not None
    return {n: [(3 * i + j - 20) % 2**bits for j in range(D)] for i, n in enumerate(NAMES)}


def to_signatures(
    run: DrivenRun, everyone: dict[str, Holder], values: dict[str, list[int]]
) -> dict[str, ConsistencyCheck]:
    """Round 0 up to the survivor set: everyone advertises, shares and masks."""
    played = play_round(run, 0, values, holders=everyone, until=Step.MASKED)
    assert set(played.statuses) == {200}
    # the graph's masked input carries its attestation
    assert all(masked.attestation for masked in played.sent[Step.MASKED].values())
    order = ROSTER.names
    return {
        n: ConsistencyCheck.from_dict(run.answer(0, n, "consistency-check"), order) for n in NAMES
    }


def sign(run: DrivenRun, everyone: dict[str, Holder], checks: dict[str, ConsistencyCheck]) -> None:
    for n in NAMES:
        if n != SILENT:
            signed = everyone[n].sign_survivors(checks[n]).to_dict()
            assert run.post(0, n, "signature", signed).status_code == 200


def unmask(run: DrivenRun, everyone: dict[str, Holder], *, within: float) -> dict[str, Any]:
    """Every signer answers its unmasking request (asked for up to ``within`` seconds);
    the stored sum once round 0 closed."""
    for n in NAMES:
        if n == SILENT:
            continue
        request = UnmaskRequest.from_dict(
            run.answer(0, n, "unmask-request", within=within), ROSTER.names
        )
        if SILENT in everyone[n]._masked_with:
            assert [a.holder for a in request.attestations] == [SILENT]
        response = everyone[n].unmask(request)
        assert SILENT in response.self_mask_shares or SILENT not in everyone[n]._masked_with
        assert run.post(0, n, "unmask", response.to_dict()).status_code == 200
    end = time.monotonic() + 30
    while run.summary()["round"] == 0:
        assert time.monotonic() < end, "round 0 did not close"
        time.sleep(0.05)
    assert run.summary()["status"] == "running"  # the run goes on, at round 1
    return run.summary()


def the_sum(tmp_path: Path, run: DrivenRun) -> dict[str, Any]:
    rows = stored(tmp_path, run.run_id)
    body: dict[str, Any] = json.loads(next(b for k, _, b in rows if k == "sum"))
    return body


def expected_total(run: DrivenRun, values: dict[str, list[int]]) -> list[float]:
    bits = run.params.modulus_bits
    assert bits is not None
    grid = grid_of(run_shares_mechanism(run.params))
    residues = [sum(values[n][j] for n in NAMES) for j in range(D)]
    return [grid * v for v in signed_sum(residues, bits)]


def closing(tmp_path: Path, run: DrivenRun, step: str) -> dict[str, Any]:
    rows = stored(tmp_path, run.run_id)
    bodies = [json.loads(b) for k, _, b in rows if k == "closed"]
    found: dict[str, Any] = next(b for b in bodies if b["step"] == step)
    return found


def test_a_restarted_signer_is_counted_out_at_once(
    coordinator: InProcessCoordinator, tmp_path: Path
) -> None:
    run = create(coordinator, deadline=600.0, on_short="extend")  # no deadline in the test
    everyone, values = holders(run, 0), inputs(run)
    checks = to_signatures(run, everyone, values)
    assert SILENT in checks[SILENT].survivors
    # An advertisement of SILENT not signed by its key: 409, and nothing changes.
    fresh = Holder(SILENT, ROSTER, KEYS[SILENT], everyone[SILENT].parameters, min_honest=1)
    advert = fresh.advertise()
    forged = replace(advert, signature=KEYS["g07"].sign(advert.signed_bytes()))
    assert run.post(0, SILENT, "advertise", forged.to_dict()).status_code == 409
    # SILENT restarts: its fresh advertisement, 409; stored, then the coordinator too.
    answer = run.post(0, SILENT, "advertise", advert.to_dict())
    assert answer.status_code == 409, answer.text
    assert [h for k, h, _ in stored(tmp_path, run.run_id) if k == "restarted"] == [SILENT]
    coordinator.restart()
    run.client = coordinator.client
    sign(run, everyone, checks)
    # Closed at once by the last signature: the deadline is 10 minutes away.
    summary = unmask(run, everyone, within=5.0)
    assert summary["round"] == 1
    signature = closing(tmp_path, run, "signature")
    assert signature["by"] == "everyone" and signature["missing"] == []
    assert SILENT not in signature["waited_for"]
    body = the_sum(tmp_path, run)
    assert body["survivors"] == NAMES  # SILENT's input is in the sum
    assert body["total"] == expected_total(run, values)


def test_a_silent_signer_costs_the_deadline_not_the_round(
    coordinator: InProcessCoordinator, tmp_path: Path
) -> None:
    """A crash (nothing more from SILENT): under "extend" the signature step closes at its
    deadline, where 802cc97 extended it for ever ("did not sign the survivor set")."""
    run = create(coordinator, deadline=5.0, on_short="extend")
    everyone, values = holders(run, 0), inputs(run)
    checks = to_signatures(run, everyone, values)
    sign(run, everyone, checks)
    summary = unmask(run, everyone, within=30.0)
    assert summary["round"] == 1
    signature = closing(tmp_path, run, "signature")
    assert signature["by"] == "deadline" and signature["missing"] == [SILENT]
    body = the_sum(tmp_path, run)
    assert body["survivors"] == NAMES
    assert body["total"] == expected_total(run, values)
