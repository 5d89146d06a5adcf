"""``ldpem run resume`` (issue 41): a secure-aggregation run pauses after repeated rounds
lost to out-of-range sums, which the masks keep anyone from pinning on a hospital; the
operator resumes it (or cancels it). Against a live coordinator, driven by in-process
holders; and the agent's side: it waits, without reporting, while the run is paused."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ldpem.cli import main
from ldpem.client.agent import Agent
from ldpem.common.wire import RoundInfo
from ldpem.server.app import create_app
from ldpem.server.secagg.rounds import UNATTRIBUTABLE_LIMIT
from tests.fedkit import ADMIN, live_server, settings
from tests.secaggdriver import D, create_run, play_round


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    with live_server(create_app(settings(tmp_path, tick=0.05))) as url:
        yield url


def test_a_paused_run_is_resumed_by_the_operator(
    server: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with httpx.Client(base_url=server, timeout=30) as client:
        run = create_run(client, "a", rounds=UNATTRIBUTABLE_LIMIT + 1)
        bits = run.params.modulus_bits
        assert bits is not None
        for t in range(UNATTRIBUTABLE_LIMIT):
            inputs = run.inputs(t)
            inputs["h0"] = [2 ** (bits - 1) - 1000] * D  # the sum comes out of range
            play_round(run, t, inputs)
        assert run.summary()["status"] == "paused"
        monkeypatch.setenv("LDPEM_ADMIN_TOKEN", ADMIN)
        command = ["run", "resume", "--coordinator", server, run.run_id]
        capsys.readouterr()
        assert main(command) == 0
        out = capsys.readouterr().out.strip().splitlines()
        assert out == [
            f"run {run.run_id} resumed at round {UNATTRIBUTABLE_LIMIT} of "
            f"{UNATTRIBUTABLE_LIMIT + 1}"
        ]
        assert run.summary()["status"] == "running"
        assert main(command) != 0  # only a paused run resumes: one line, no traceback
        err = capsys.readouterr().err
        assert "not resumed" in err and "only a paused run can be resumed" in err
        assert "Traceback" not in err


def test_the_agent_waits_while_the_run_is_paused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Paused twice, then finished: the agent logs the pause once, reports nothing and
    ends with the run (0)."""
    answers: list[dict[str, Any]] = [
        {"status": "paused", "reason": "three rounds lost; resume or cancel"},
        {"status": "paused", "reason": "three rounds lost; resume or cancel"},
        {"status": "finished", "reason": None},
    ]
    reported: list[int] = []

    def poll(self: Agent, run_id: str, after: int) -> RoundInfo:
        answer = answers.pop(0)
        return base.model_copy(update=answer)

    agent_session = _session_stub()
    base = agent_session.info
    monkeypatch.setattr(Agent, "poll", poll)
    monkeypatch.setattr(Agent, "_report", lambda self, session, info: reported.append(info.round))
    monkeypatch.setattr("ldpem.client.agent.check_round", lambda *args: None)
    monkeypatch.setattr(Agent, "_announce", lambda self, session, t: None)
    monkeypatch.setattr(Agent, "_warn_missed", lambda self, session, first, end: None)
    agent = Agent.__new__(Agent)
    with caplog.at_level(logging.WARNING, logger="ldpem.client"):
        assert agent._follow(agent_session.session) == 0  # type: ignore[arg-type]
    assert reported == [] and answers == []
    paused = [r.getMessage() for r in caplog.records if "paused" in r.getMessage()]
    assert paused == [
        "run r1 is paused (three rounds lost; resume or cancel); waiting for the operator"
    ]


class _session_stub:
    """The least of an agent's session ``_follow`` reads, and a round's info."""

    def __init__(self) -> None:
        from types import SimpleNamespace

        self.session = SimpleNamespace(
            run_id="r1", me=None, params_json="", params=SimpleNamespace(rounds=2)
        )
        self.info = RoundInfo.model_construct(
            run_id="r1", round=1, status="running", reason=None, beta=[0.0]
        )
