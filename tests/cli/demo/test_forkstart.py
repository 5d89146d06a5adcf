"""ldpem.demo.forkstart: an ``ldpem`` command forked from this interpreter behaves as
``Processes.start`` runs it in a fresh one (log, exit status, environment, session), and
stopping it ends what it started.

A fork is refused while the process runs other threads, and earlier tests of a whole run
can leave some in pytest's process (Dask's event loop, for one): each test then runs in a
fresh interpreter of its own, where its fork is allowed, and must pass there."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ldpem import __version__
from ldpem.cli import main
from ldpem.demo.forkstart import fork_agent, fork_command, fork_coordinator
from ldpem.processes import Processes


def in_a_fresh_interpreter(test: Callable[..., None]) -> Callable[..., None]:
    """``test`` here when this process runs no other thread, else in a new pytest process
    (whose exit status and output are the result)."""

    @functools.wraps(test)
    def run(*args: object, **kwargs: object) -> None:
        if threading.active_count() == 1:
            test(*args, **kwargs)
            return
        node = f"{__file__}::{test.__name__}"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", node]
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
        assert "1 passed" in done.stdout, done.stdout[-4000:]

    return run


@in_a_fresh_interpreter
def test_a_forked_command_logs_and_exits_as_a_started_one(tmp_path: Path) -> None:
    with Processes(tmp_path / "logs") as processes:
        fine = fork_command(processes, "fine", ["--version"], main=main)
        broken = fork_command(processes, "broken", ["no-such-command"], main=main)
        started = processes.start("started", "no-such-command")
        assert processes.wait(["fine", "broken", "started"], timeout=60)
        assert (fine.returncode, broken.returncode) == (0, 2)
        assert processes.log(fine).strip() == f"ldpem {__version__}"
        # The same one-line error as the fresh interpreter's.
        assert processes.log(broken) == processes.log(started)
        problem = processes.failed()
        assert problem is not None and problem.startswith("broken exited with status 2: ")


@in_a_fresh_interpreter
def test_a_forked_child_has_its_environment_and_session(tmp_path: Path) -> None:
    processes = Processes(tmp_path, env={"LDPEM_FORK_A": "manager", "LDPEM_FORK_GONE": None})
    os.environ["LDPEM_FORK_GONE"] = "inherited"
    try:
        # A token file that is not private: the agent names it in its one-line error,
        # after reading its environment; LDPEM_TOKEN is unset so the file is what it reads.
        child = fork_agent(
            processes,
            "h1",
            main=main,
            url="http://127.0.0.1:9",
            token="t" * 32,
            model="gmm",
            data=tmp_path / "missing.npy",
            state=tmp_path / "state",
            args=["--epsilon", "1", "--delta", "1e-6"],
            env={"LDPEM_TOKEN": None},
        )
        assert child.wait(60) == 2
        assert "missing.npy: no such file" in processes.log(child)
        # The parent's environment is untouched by the child's.
        assert os.environ["LDPEM_FORK_GONE"] == "inherited"
        assert processes.environment()["LDPEM_FORK_A"] == "manager"
        assert "LDPEM_FORK_GONE" not in processes.environment()
    finally:
        del os.environ["LDPEM_FORK_GONE"]
        processes.stop()
    assert not (tmp_path / "h1.token").exists()


@in_a_fresh_interpreter
def test_stop_ends_a_forked_coordinator_that_leads_its_own_session(tmp_path: Path) -> None:
    processes = Processes(tmp_path)
    child, url = fork_coordinator(
        processes, main=main, state=tmp_path / "c.sqlite", log_level="info"
    )
    try:
        processes.wait_healthy(child, url, timeout=60)
        # Its own session and process group: a signal to the group reaches what it starts
        # (its pool's fork server), and a Ctrl-C at the terminal does not reach it.
        assert os.getsid(child.pid) == os.getpgid(child.pid) == child.pid != os.getsid(0)
    finally:
        processes.stop(grace=10)
    # SIGTERM: the server's own orderly shutdown, which then ends by the signal it got.
    assert child.returncode == -signal.SIGTERM
    assert "Finished server process" in processes.log(child)


@in_a_fresh_interpreter
def test_a_wait_with_a_timeout_raises_and_a_fork_with_threads_is_refused(
    tmp_path: Path,
) -> None:
    with Processes(tmp_path) as processes:
        child, _ = fork_coordinator(processes, main=main, state=tmp_path / "c.sqlite")
        began = time.monotonic()
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(0.2)
        assert time.monotonic() - began >= 0.2
        stop = threading.Event()
        other = threading.Thread(target=stop.wait)
        other.start()
        try:
            with pytest.raises(RuntimeError, match="cannot fork h2: this process runs other"):
                fork_command(processes, "h2", ["--version"], main=main)
        finally:
            stop.set()
            other.join()
