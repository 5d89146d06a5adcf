"""ldpem.processes: the one process manager of the demo, the benchmarks and the tests."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from ldpem import __version__
from ldpem.processes import (
    Processes,
    ProcessFailed,
    start_agent,
    start_coordinator,
    wait_until,
)


def test_a_child_logs_to_its_file_and_a_failure_names_it(tmp_path: Path) -> None:
    with Processes(tmp_path / "logs") as processes:
        fine = processes.start("fine", "--version")
        broken = processes.start("broken", "no-such-command")
        assert processes.wait(["fine", "broken"], timeout=60)
        assert (fine.returncode, broken.returncode) == (0, 2)
        assert processes.log(fine).strip() == f"ldpem {__version__}"
        assert (tmp_path / "logs" / "fine.log").read_text() == processes.log(fine)
        problem = processes.failed()
        assert problem is not None
        assert problem.startswith("broken exited with status 2: ")
        assert "no-such-command" in problem


def test_stop_ends_every_child_still_running(tmp_path: Path) -> None:
    processes = Processes(tmp_path)
    child, url = start_coordinator(processes, state=tmp_path / "c.sqlite", wait=False)
    assert url.startswith("http://127.0.0.1:") and child.poll() is None
    processes.stop(grace=10)
    assert child.poll() is not None


def test_a_coordinator_that_exits_is_reported_with_its_last_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with Processes(tmp_path) as processes, pytest.raises(ProcessFailed) as failure:
        # A state path under a regular file cannot be created: the coordinator exits 2.
        start_coordinator(processes, state=tmp_path / "file" / "c.sqlite")
    assert str(failure.value).startswith("coordinator exited with status 2: ldpem coordinator:")


def test_an_agent_gets_its_token_in_a_private_file_not_on_its_command_line(
    tmp_path: Path,
) -> None:
    with Processes(tmp_path) as processes:
        agent = start_agent(
            processes,
            "h1",
            url="http://127.0.0.1:9",  # nothing listens there; the agent gives up
            token="the-secret-token-0123456789",
            model="gmm",
            data=tmp_path / "missing.csv",
            state=tmp_path / "state",
        )
        assert isinstance(agent.args, list)
        assert "the-secret-token-0123456789" not in " ".join(map(str, agent.args))
        token_file = tmp_path / "h1.token"
        assert token_file.read_text() == "the-secret-token-0123456789"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert agent.wait(60) == 2  # the missing data file: one line, exit 2
    assert not token_file.exists()  # stop removed it


def test_wait_until_names_what_it_waited_for() -> None:
    wait_until(lambda: True, timeout=0, what="nothing")
    with pytest.raises(ProcessFailed, match="timed out after 0 s waiting for the moon"):
        wait_until(lambda: False, timeout=0, what="the moon")
