"""The deadline tick (``ldpem.server.machine.expire``) and secure aggregation: a secagg
run's steps keep their own deadlines (``ldpem.server.secagg.rounds``), so the tick neither closes
its round nor reads its run, however long ago the round's own deadline passed (reading it
at every tick cost a coordinator with a 1000-holder run a share of its CPU for nothing,
docs/PERFORMANCE.md)."""

from __future__ import annotations

import time
from pathlib import Path

from ldpem.server.machine import expire
from ldpem.server.store import RunRow, Store
from tests.fedkit import admin_headers, run_request
from tests.secaggdriver import InProcessCoordinator, create_run


class CountingStore(Store):
    """A store that counts the runs it was asked for, by id."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.asked: list[str] = []

    def get_run(self, run_id: str) -> RunRow | None:
        self.asked.append(run_id)
        return super().get_run(run_id)


def test_the_tick_leaves_secure_rounds_to_their_steps(tmp_path: Path) -> None:
    coordinator = InProcessCoordinator(tmp_path)
    try:
        secure = create_run(coordinator.client, "tick", round_deadline=1.0).run_id
        created = coordinator.client.post(
            "/v1/runs",
            json=run_request(records=100, d=3, round_deadline=1.0),
            headers=admin_headers(),
        )
        assert created.status_code == 201, created.text
        plain: str = created.json()["run_id"]
    finally:
        coordinator.close()
    store = CountingStore(tmp_path / "coordinator.sqlite")
    try:
        assert {r.run_id for r in store.open_rounds()} == {secure, plain}
        assert {r.run_id for r in store.open_rounds(plain=True)} == {plain}
        # Far past both rounds' deadlines: the plain run's round is handled (its quorum is
        # not met, so it fails or is extended), the secure run is not even read.
        expire(store, time.time() + 10**6)
        assert secure not in store.asked
        assert plain in store.asked
        run = store.get_run(secure)
        assert run is not None and run.status == "running" and run.current_round == 0
    finally:
        store.close()
