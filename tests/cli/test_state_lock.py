"""One coordinator per state (issue 43, finding 1): a second ``ldpem coordinator`` on the
state of a live one exits at once, with one line naming the first one's pid and port,
before it touches the state; once the first one is gone the state is free again. Real
processes, as an operator starts them in two terminals."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ldpem.processes import Processes, coordinator_command, free_port, start_coordinator

#: Seconds a refused start may take: a Python start-up and the parser, nothing served.
REFUSED_WITHIN = 60.0


def _second_start(processes: Processes, state: Path, port: int) -> tuple[int, list[str]]:
    """``ldpem coordinator`` on ``state`` and ``port`` run to its end: exit code, stderr lines."""
    command, _ = coordinator_command(state=state, port=port)
    done = subprocess.run(
        [sys.executable, "-m", "ldpem", *command],
        capture_output=True,
        text=True,
        env=processes.environment(),
        cwd=processes.cwd,
        timeout=REFUSED_WITHIN,
        check=False,
    )
    return done.returncode, done.stderr.strip().splitlines()


def test_a_second_coordinator_on_one_state_exits_at_once_naming_the_first(
    procs: Processes, tmp_path: Path
) -> None:
    state = tmp_path / "coord" / "coordinator.sqlite"
    state.parent.mkdir()
    first, url = start_coordinator(procs, state=state)
    first_port = url.rsplit(":", 1)[1]
    for port in (free_port(), int(first_port)):  # another port, and the same one
        code, lines = _second_start(procs, state, port)
        assert code != 0, lines
        assert len(lines) == 1, lines  # no traceback, no uvicorn "[Errno 98]"
        line = lines[0]
        assert line.startswith(f"ldpem coordinator: error: {state}: another coordinator"), line
        assert f"pid {first.pid}, port {first_port}" in line, line
        assert "another --state" in line, line
    assert first.poll() is None  # the first one serves on

    first.terminate()
    assert first.wait(30) is not None
    # The first one gone (its lock file left behind), the state is served again.
    again, _ = start_coordinator(procs, state=state, name="again")
    assert again.poll() is None
