"""Real processes for the integration tests: start `python -m ldpem …`, always kill them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tests.fedkit import ADMIN


class Processes:
    """Processes started by one test; ``stop_all`` kills those still running (by pid)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.started: list[subprocess.Popen[bytes]] = []
        self.logs: dict[int, Path] = {}

    def start(
        self, name: str, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        log = self.directory / f"{name}.log"
        # Public status: these tests read run state without a token (the private default is
        # covered by tests/server/test_read_auth.py).
        environment = {**os.environ, "LDPEM_ADMIN_TOKEN": ADMIN, "LDPEM_PUBLIC_STATUS": "1"}
        environment.pop("LDPEM_AGENT_FAULT", None)
        environment.update(env or {})
        with log.open("ab") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "ldpem", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=environment,
                cwd=self.directory,
            )
        self.started.append(process)
        self.logs[process.pid] = log
        return process

    def log(self, process: subprocess.Popen[bytes]) -> str:
        return self.logs[process.pid].read_text()

    def stop_all(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.kill()
                process.wait(10)


def coordinator(procs: Processes, port: int, state: Path, *extra: str) -> subprocess.Popen[bytes]:
    process = procs.start(
        "coordinator",
        "coordinator",
        "--port",
        str(port),
        "--state",
        str(state),
        "--log-level",
        "warning",
        *extra,
        env={"LDPEM_TICK": "0.1"},
    )
    wait_healthy(f"http://127.0.0.1:{port}", process)
    return process


def wait_healthy(
    url: str, process: subprocess.Popen[bytes], timeout: float = 60.0, **kw: Any
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the coordinator exited with status {process.returncode}")
        try:
            if httpx.get(f"{url}/healthz", timeout=2.0, **kw).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError("the coordinator did not become healthy")


def wait_for(predicate: Any, timeout: float = 120.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
