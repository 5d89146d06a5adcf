"""Start ``ldpem`` commands as child processes forked from this interpreter.

``ldpem demo`` runs a coordinator and K agents on one machine. Started as fresh
interpreters (``ldpem.processes``), each first spends most of a second of CPU importing
numpy, scipy, pydantic and the rest, K + 1 times over, on the cores the run itself needs.
Forked from the demo, which has imported them already, a child starts at once: it is the
same ``ldpem COMMAND ARGS`` (``ldpem.cli.main``, which the demo's command hands down as
``main``: the same parser, the same agent and coordinator code, the same checks), in a
process of its own, in its own session, its output in its log, talking HTTP on 127.0.0.1
like the others. Its environment and working directory are the ones ``Processes`` gives a
started child.

A fork copies only the thread that calls it, so ``fork_command`` refuses to run while
this process runs other threads (their locks would be copied in whatever state they
are). What the forked child does not share with a fresh interpreter: modules the parent
imported are loaded already (the child imports what it needs on top, as usual), and its
command line in ``ps`` is the parent's. It ends with ``os._exit`` and the command's exit
status, so nothing of the parent's (its ``finally`` blocks, ``atexit``) runs in it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Unpack

from ldpem.processes import AgentOptions, Processes, agent_command, coordinator_command

__all__ = ["ForkedChild", "Main", "fork_agent", "fork_command", "fork_coordinator"]

#: The ``ldpem`` command's entry point (``ldpem.cli.main``: arguments → exit status), which
#: a forked child runs. It is passed down from the command line, not imported here: this
#: module stands below ``ldpem.cli``, which imports the demo's command.
Main = Callable[[Sequence[str]], int]


class ForkedChild:
    """A child forked by ``fork_command``: what ``Processes`` needs of it (``poll``,
    ``wait``, ``terminate``, ``kill``, ``returncode``, as ``subprocess.Popen`` has them).
    Waiting sleeps on the child's pidfd (Linux) until it exits, instead of polling. A
    signal goes to the child's process group: a coordinator stopped while its pool's fork
    server is still starting would otherwise leave that server running for seconds."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._pidfd: int | None = None
        with contextlib.suppress(AttributeError, OSError):  # no pidfd: wait polls
            self._pidfd = os.pidfd_open(pid)

    def poll(self) -> int | None:
        """The exit status once the child has exited (reaped here), else None."""
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: its status is lost
                pid, status = self.pid, 255 << 8
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
                self._close()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The exit status, waiting up to ``timeout`` seconds (None: for ever);
        ``subprocess.TimeoutExpired`` after that."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
            if self._pidfd is not None:
                select.select([self._pidfd], [], [], left)
            else:
                time.sleep(0.01 if left is None else min(0.01, left))
        return code

    def send_signal(self, number: int) -> None:
        """Signal the child and what it started (its process group, which it leads: the
        coordinator's pool of simulations), while the child runs."""
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, number)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


def fork_command(
    processes: Processes,
    name: str,
    command: Sequence[str],
    *,
    main: Main,
    env: Mapping[str, str | None] | None = None,
) -> ForkedChild:
    """Run ``ldpem COMMAND`` (``main(command)``) as ``name`` in a forked child managed by
    ``processes``, as ``processes.start(name, *command, env=env)`` would run it in a fresh
    interpreter: the same environment, working directory, log (``<logs>/<name>.log``,
    appended) and session of its own. RuntimeError when other threads run here."""
    if threading.active_count() > 1:
        raise RuntimeError(f"cannot fork {name}: this process runs other threads")
    environment = processes.environment(env)
    path = processes.logs / f"{name}.log"
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # pragma: no cover  (the child; its log and exit status are tested)
        os._exit(_child(log, list(command), environment, processes.cwd, main))
    os.close(log)
    child = ForkedChild(pid)
    processes.adopt(name, child, path)
    return child


def _child(
    log: int, command: list[str], environment: dict[str, str], cwd: Path | None, main: Main
) -> int:
    """In the forked child: become the command's process and run it; its exit status."""
    code = 1
    try:
        os.setsid()
        # What a fresh interpreter has: default signal handling (SIGINT raises
        # KeyboardInterrupt), stdin empty, stdout and stderr into the log.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        _fresh_streams_and_logging()
        os.environ.clear()
        os.environ.update(environment)
        if cwd is not None:
            os.chdir(cwd)
        # The command line that runs the demo is what runs each child, not a layer below it.
        code = main(command)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:  # reported in the log, as an interpreter would
        traceback.print_exc()
    finally:
        logging.shutdown()
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
    return code


def _fresh_streams_and_logging() -> None:
    """``sys.stdout`` and ``sys.stderr`` on file descriptors 1 and 2, and no logging set
    up, as in a fresh interpreter (the parent may have replaced its streams or set up
    logging: a test's capture, for one)."""
    encoding = getattr(sys.__stdout__, "encoding", None) or "utf-8"
    sys.stdout = open(1, "w", encoding=encoding, closefd=False)  # noqa: SIM115
    sys.stderr = open(  # noqa: SIM115
        2, "w", encoding=encoding, errors="backslashreplace", buffering=1, closefd=False
    )
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.setLevel(logging.WARNING)


def fork_coordinator(
    processes: Processes,
    *,
    main: Main,
    state: Path,
    args: Collection[str] = (),
    env: Mapping[str, str | None] | None = None,
    log_level: str = "warning",
    name: str = "coordinator",
) -> tuple[ForkedChild, str]:
    """``ldpem.processes.start_coordinator(..., wait=False)``, forked: the child and its
    base URL (call ``Processes.wait_healthy`` before using it)."""
    command, url = coordinator_command(state=state, args=args, log_level=log_level)
    return fork_command(processes, name, command, main=main, env=env), url


def fork_agent(
    processes: Processes,
    name: str,
    *,
    main: Main,
    env: Mapping[str, str | None] | None = None,
    **options: Unpack[AgentOptions],
) -> ForkedChild:
    """``ldpem.processes.start_agent``, forked: the token in its private file, never on a
    command line."""
    command = agent_command(processes, name, **options)
    return fork_command(processes, name, command, main=main, env=env)
