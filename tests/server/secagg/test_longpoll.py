"""The secagg long-poll sleeps until its round changes: a holder waiting on an open step is
not woken until the step closes or its ``wait`` ends (it used to re-check every second,
which at K = 1000 woke about a thousand waiting requests a second, docs/PERFORMANCE.md)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from ldpem.server.secagg.rounds import SecAggRounds
from tests.secaggdriver import NAMES, InProcessCoordinator, create_run


def test_a_waiting_holder_is_woken_by_the_step_closing_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    looks: list[float] = []
    output = SecAggRounds.output

    def counted(self: SecAggRounds, *args: object) -> bytes | None:
        looks.append(time.monotonic())
        return output(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(SecAggRounds, "output", counted)
    coordinator = InProcessCoordinator(tmp_path)
    try:
        run = create_run(coordinator.client, "poll")
        started = time.monotonic()
        # The advertise step stays open (nobody advertises): 202 after the whole wait,
        # having looked at the round when asked and when the wait ended, not in between.
        assert run.get(0, NAMES[0], "participants", wait=3.0).status_code == 202
        assert time.monotonic() - started >= 3.0
        assert len(looks) == 2
    finally:
        coordinator.close()


def test_a_waiting_holder_is_answered_as_soon_as_the_step_closes(tmp_path: Path) -> None:
    coordinator = InProcessCoordinator(tmp_path)
    try:
        run = create_run(coordinator.client, "wake")
        holders = run.holders(0)
        answered: list[float] = []

        def poll() -> None:
            response = run.get(0, NAMES[0], "participants", wait=30.0)
            assert response.status_code == 200, response.text
            answered.append(time.monotonic())

        waiter = threading.Thread(target=poll)
        waiter.start()
        time.sleep(0.5)  # the waiter is asleep in its long-poll
        closed = time.monotonic()
        for name in NAMES:
            posted = run.post(0, name, "advertise", holders[name].advertise().to_dict())
            assert posted.status_code == 200, posted.text
        waiter.join(timeout=30.0)
        assert answered, "the long-poll did not answer"
        # Woken by the close, not by its 30 s wait ending.
        assert answered[0] - closed < 10.0
    finally:
        coordinator.close()
