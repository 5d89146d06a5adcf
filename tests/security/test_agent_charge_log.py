"""The agent says a round is charged only once it is (issue 43, finding 12): it logged
"charged: epsilon … with at least h honest holders" when it joined a secagg run, before
any round was reserved, and then refused the run with nothing charged. Against the fake
coordinator of tests/security/test_secagg_graph_coordinator.py (K = 16 on the graph)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.secaggkit import FakeConsortium, attack, refused
from tests.security.test_secagg_graph_coordinator import NAMES, GraphFake

pytestmark = pytest.mark.slow


@dataclass
class LiesAtRoundZero(GraphFake):
    """Publishes the run honestly at ``/me``, then another t_min with round 0: the agent
    refuses at its first poll, before anything is reserved."""

    def published(self, t: int | None) -> dict[str, Any]:
        params = super().published(t)
        if t == 0:
            params["t_min"] = params["t_min"] + 1
        return params


def test_a_secagg_run_refused_before_its_first_round_logs_no_charge(tmp_path: Path) -> None:
    consortium = FakeConsortium.make(NAMES, secagg_topology="graph", colluders=2)
    for name in ("honest", "lied"):
        (tmp_path / name).mkdir()
    honest = attack(tmp_path / "honest", GraphFake(consortium))
    assert honest.code == 0, honest.log[-3000:]
    # The control: each round charged, said once it is, with its round.
    assert "round 0 charged: epsilon" in honest.log and "round 1 charged: epsilon" in honest.log

    lied = attack(tmp_path / "lied", LiesAtRoundZero(consortium))
    refused(lied, "changed its parameters")
    assert "charged" not in lied.log, lied.log[-3000:]
    assert lied.posts == []
