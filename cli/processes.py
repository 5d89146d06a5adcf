"""Coordinator and agent processes on 127.0.0.1, started as an operator starts them.

One process manager for ``ldpem demo``, the benchmarks and the tests: a child is
``python -m ldpem coordinator …`` or ``python -m ldpem client …``, its stdout and stderr go
to ``<logs>/<name>.log`` (appended: a restarted coordinator keeps one log), and
``Processes.stop`` — also on leaving a ``with`` block, whatever the exit — ends every child
still running, by its own process id: SIGTERM, then SIGKILL after a grace period.

Children run in their own session, so a Ctrl-C at the terminal reaches only the program
that started them, which then stops them in order (``ldpem demo`` turns SIGTERM into the
same path).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, NotRequired, Protocol, TypedDict, Unpack

import httpx

__all__ = [
    "HOST",
    "ProcessFailed",
    "Processes",
    "Running",
    "agent_command",
    "coordinator_command",
    "free_port",
    "start_agent",
    "start_coordinator",
    "wait_until",
]

HOST = "127.0.0.1"
Child = subprocess.Popen[bytes]


class Running(Protocol):
    """What the manager needs of a child: a ``Child``, or one started otherwise (the
    demo forks its coordinator and agents from its own interpreter, ``ldpem.demo.forkstart``)."""

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


class ProcessFailed(RuntimeError):
    """A child exited when it should not have, or did not become ready in time."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS picks it)."""
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def wait_until(
    predicate: Callable[[], bool], *, timeout: float, what: str, poll: float = 0.05
) -> None:
    """Poll ``predicate`` until it holds; ``ProcessFailed`` naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise ProcessFailed(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(poll)


class Processes:
    """Child ``python -m ldpem`` processes, their logs, and their clean-up.

    ``env`` is laid over ``os.environ`` for every child (a value of None removes the
    variable); ``cwd`` is their working directory (default: this process's).
    """

    def __init__(
        self,
        logs: Path,
        *,
        env: Mapping[str, str | None] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.logs = logs
        logs.mkdir(parents=True, exist_ok=True)
        self.env = dict(env or {})
        self.cwd = cwd
        self.children: list[tuple[str, Running]] = []
        self._log_paths: dict[Running, Path] = {}
        #: Token files of the agents (``start_agent``), removed by ``stop``.
        self.secrets: list[Path] = []

    def __enter__(self) -> Processes:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self, name: str, *args: str, env: Mapping[str, str | None] | None = None) -> Child:
        """Start ``python -m ldpem ARGS`` as ``name`` (its log: ``<logs>/<name>.log``);
        ``env`` is laid over the manager's (None removes a variable)."""
        environment = self.environment(env)
        path = self.logs / f"{name}.log"
        with path.open("ab") as log:
            child = subprocess.Popen(
                [sys.executable, "-m", "ldpem", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=environment,
                cwd=self.cwd,
                start_new_session=True,
            )
        self.adopt(name, child, path)
        return child

    def environment(self, env: Mapping[str, str | None] | None = None) -> dict[str, str]:
        """A child's environment: this process's, with the manager's ``env`` and then
        ``env`` laid over it (None removes a variable)."""
        environment = dict(os.environ)
        for key, value in {**self.env, **(env or {})}.items():
            if value is None:
                environment.pop(key, None)
            else:
                environment[key] = value
        return environment

    def adopt(self, name: str, child: Running, log: Path) -> None:
        """Manage ``child``, started otherwise, as ``name`` logging to ``log``: it is
        checked, waited for and stopped like the children ``start`` starts."""
        self.children.append((name, child))
        self._log_paths[child] = log

    def log(self, child: Running) -> str:
        """Everything the child (and earlier children of the same name) wrote."""
        return self._log_paths[child].read_text(errors="replace")

    def failed(self) -> str | None:
        """The first child that exited non-zero, with the last line of its log."""
        for name, child in self.children:
            if child.poll() not in (None, 0):
                text = self.log(child).strip()
                last = text.splitlines()[-1] if text else "(no output)"
                return f"{name} exited with status {child.returncode}: {last}"
        return None

    def wait(self, names: Collection[str], timeout: float) -> bool:
        """Wait up to ``timeout`` seconds in all for the children called ``names`` to exit;
        whether they all did."""
        deadline = time.monotonic() + timeout
        for name, child in self.children:
            if name in names:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.wait(max(0.1, deadline - time.monotonic()))
        return all(child.poll() is not None for name, child in self.children if name in names)

    def wait_healthy(self, child: Running, url: str, *, timeout: float, **client: Any) -> None:
        """Poll ``GET url/healthz`` until it answers 200; ``ProcessFailed`` if ``child``
        exits first (with its last log line) or after ``timeout`` seconds. ``client``:
        options of ``httpx.Client`` (``verify`` for TLS)."""
        deadline = time.monotonic() + timeout
        with httpx.Client(base_url=url, timeout=5.0, **client) as http:
            while time.monotonic() < deadline:
                if child.poll() is not None:
                    raise ProcessFailed(self.failed() or f"{url}: the process exited")
                with contextlib.suppress(httpx.TransportError):
                    if http.get("/healthz").status_code == 200:
                        return
                time.sleep(0.05)
        raise ProcessFailed(f"the coordinator at {url} did not become healthy within {timeout:g} s")

    def stop(self, grace: float = 5.0) -> None:
        """End every child still running: SIGTERM, and SIGKILL for those still alive after
        ``grace`` seconds. Each is reaped, so none is left behind as a zombie. Then the
        agents' token files are removed."""
        for _, child in self.children:
            if child.poll() is None:
                child.terminate()
        deadline = time.monotonic() + grace
        for _, child in self.children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(max(0.0, deadline - time.monotonic()))
            if child.poll() is None:
                child.kill()
                child.wait()
        for secret in self.secrets:
            secret.unlink(missing_ok=True)


def start_coordinator(
    processes: Processes,
    *,
    state: Path,
    port: int | None = None,
    args: Collection[str] = (),
    env: Mapping[str, str | None] | None = None,
    log_level: str = "warning",
    timeout: float = 60.0,
    name: str = "coordinator",
    wait: bool = True,
    **client: Any,
) -> tuple[Child, str]:
    """Start ``ldpem coordinator`` on ``port`` (default: a free one) with its state in
    ``state`` and the extra ``args``; returns (process, base URL) once it is healthy, or at
    once with ``wait=False`` (then call ``Processes.wait_healthy`` before using it).
    ``client``: options of ``httpx.Client`` for the health check (``verify`` for TLS)."""
    command, url = coordinator_command(state=state, port=port, args=args, log_level=log_level)
    child = processes.start(name, *command, env=env)
    if wait:
        processes.wait_healthy(child, url, timeout=timeout, **client)
    return child, url


def coordinator_command(
    *,
    state: Path,
    port: int | None = None,
    args: Collection[str] = (),
    log_level: str = "warning",
) -> tuple[list[str], str]:
    """The arguments of ``ldpem coordinator`` on ``port`` (default: a free one) with its
    state in ``state`` and the extra ``args``, and its base URL."""
    port = free_port() if port is None else port
    tls = "--tls-cert" in args
    url = f"{'https' if tls else 'http'}://{HOST}:{port}"
    command = ["coordinator", "--port", str(port), "--state", str(state)]
    return [*command, "--log-level", log_level, *args], url


class AgentOptions(TypedDict):
    """What ``ldpem client`` is started with (``agent_command``): the coordinator's ``url``,
    the hospital's ``token``, its ``model`` records ``data``, its ``state`` directory, the
    extra ``args`` (budget, seed, …) and its ``log_level``."""

    url: str
    token: str
    model: str
    data: Path | str
    state: Path | str
    args: NotRequired[Collection[str]]
    log_level: NotRequired[str]


def start_agent(
    processes: Processes,
    name: str,
    *,
    env: Mapping[str, str | None] | None = None,
    **options: Unpack[AgentOptions],
) -> Child:
    """Start ``ldpem client`` as hospital ``name`` with ``options`` (``AgentOptions``). The
    token goes in a file only this user can read, ``<logs>/<name>.token``, not on the
    command line, as a hospital would keep it; ``stop`` removes it."""
    return processes.start(name, *agent_command(processes, name, **options), env=env)


def agent_command(processes: Processes, name: str, **options: Unpack[AgentOptions]) -> list[str]:
    """The arguments of ``ldpem client`` as ``start_agent`` starts it, once its token is in
    ``<logs>/<name>.token`` (mode 600; ``processes.stop`` removes it)."""
    token_file = (processes.logs / f"{name}.token").absolute()
    token_file.unlink(missing_ok=True)
    descriptor = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(options["token"])
    processes.secrets.append(token_file)
    command = ["client", "--coordinator", options["url"], "--token-file", str(token_file)]
    command += ["--model", options["model"], "--data", str(options["data"])]
    command += ["--state", str(options["state"]), "--log-level"]
    return [*command, options.get("log_level", "warning"), *options.get("args", ())]
