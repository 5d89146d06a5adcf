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
from pathlib import Path
from typing import Any

import pytest

from ldpem.common.secagg import Holder
from ldpem.common.secagg.runvalues import grid_of, run_shares_mechanism, signed_sum
from ldpem.common.secagg.steps import HOLDER_STEPS
from tests.secaggdriver import (
    KEYS,
    NAMES,
    D,
    DrivenRun,
    InProcessCoordinator,
    create_run,
    play_round,
    stored,
)

#: Where the coordinator is restarted: after the first two holders' message of a step
#: ("-partial"), or once the step closed.
POINTS = [
    f"{step}{part}"
    for step in HOLDER_STEPS
    for part in ("-partial", "")
    if f"{step}{part}" != "unmask"
]


def create(c: InProcessCoordinator) -> DrivenRun:
    """A run of K hospitals whose steps close only when every holder sent (no deadline)."""
    run = create_run(c.client, "a", round_deadline=600.0, on_short="extend")
    assert run.params.colluders == 1  # the default: ⌊4/3⌋ = 1 < 2·3 − 4
    return run


@pytest.mark.parametrize("point", POINTS)
def test_a_restart_at_any_point_of_the_round_continues_it(
    coordinator: InProcessCoordinator, tmp_path: Path, point: str
) -> None:
    run = create(coordinator)
    holders = run.holders(0)
    inputs = run.inputs(7)
    before: list[tuple[str, str, str]] = []

    def at(here: str, posted: list[tuple[str, str, Any]]) -> None:
        if here != point:
            return
        before.extend(stored(tmp_path, run.run_id))
        coordinator.restart()
        run.client = coordinator.client
        # The holders that sent a step are answered as before: their retry is accepted …
        for step, holder, message in posted:
            assert run.post(0, holder, step, message.to_dict()).status_code == 200, (step, holder)
        # … and a different message of theirs for the open step is refused.
        if posted[-1][0] == "advertise":
            holder = posted[0][1]
            other = Holder(
                holder,
                holders[holder].roster,
                KEYS[holder],
                holders[holder].parameters,
                min_honest=1,
            )
            assert run.post(0, holder, "advertise", other.advertise().to_dict()).status_code == 409

    played = play_round(run, 0, inputs, holders=holders, at=at)
    assert played.statuses == [200] * (len(HOLDER_STEPS) * len(NAMES))
    assert coordinator.restarts == 1
    after = stored(tmp_path, run.run_id)
    # Nothing stored before the restart was stored again or changed; every holder's message
    # of each step is stored once.
    assert after[: len(before)] == before
    kinds = [(k, h) for k, h, _ in after if k in HOLDER_STEPS]
    assert sorted(kinds) == sorted((k, n) for k in HOLDER_STEPS for n in NAMES)
    assert [k for k, _, _ in after].count("participants") == 1
    assert [k for k, _, _ in after].count("consistency_check") == 1
    assert [k for k, _, _ in after].count("unmask_request") == 1
    assert [k for k, _, _ in after].count("sum") == 1
    # The round closed with the sum of the inputs.
    bits = run.params.modulus_bits
    assert bits is not None
    grid = grid_of(run_shares_mechanism(run.params))
    residues = [sum(inputs[n][j] for n in NAMES) for j in range(D)]
    expected = [grid * v for v in signed_sum(residues, bits)]
    total = json.loads(next(b for k, _, b in after if k == "sum"))["total"]
    assert total == expected
    assert (run.summary()["status"], run.summary()["round"]) == ("running", 1)


def test_a_step_complete_but_not_closed_closes_at_the_restart(
    coordinator: InProcessCoordinator, tmp_path: Path
) -> None:
    """Killed after the last share was stored and before the bundles were: the restart
    closes the step itself, with the same bundles (the aggregator draws no randomness)."""
    run = create(coordinator)
    removed: list[tuple[str, str, str]] = []

    def at(here: str, posted: list[tuple[str, str, Any]]) -> None:
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
        run.client = coordinator.client

    played = play_round(run, 0, run.inputs(7), at=at)
    assert played.statuses == [200] * (len(HOLDER_STEPS) * len(NAMES))
    assert len(removed) == len(NAMES)
    assert [r for r in stored(tmp_path, run.run_id) if r[0] == "bundle"] == removed
    assert run.summary()["round"] == 1
