"""A document's commands run as written (tests/cli/test_readme_separate_machines.py,
tests/cli/test_federated_secagg_doc.py): its section, its fenced blocks, each shell block
by the command it starts with, and ``Machines`` that run them one directory per machine,
followed until ``ldpem run status --wait`` says the run finished."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import ssl
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest


def section(document: Path, heading: str) -> str:
    """The section of ``document`` under ``heading`` (a whole "## …" line), up to the next."""
    text = document.read_text()
    start = text.index(heading)
    end = text.index("\n## ", start + len(heading))
    return text[start:end]


@dataclass(frozen=True)
class Section:
    """A document's section as its test runs it: its shell blocks by role
    (``shell_blocks``), its one JSON block, and its ``ldpem generate … --part N …`` line."""

    blocks: dict[str, str]
    json: str
    generate: str


def read_section(document: Path, heading: str, roles: Mapping[str, str]) -> Section:
    """The section of ``document`` under ``heading``, its shell blocks by ``roles``
    (``shell_blocks``); it must have exactly one JSON block and one generate line."""
    text = section(document, heading)
    (request,) = fenced(text, "json")
    (generate,) = re.findall(r"`(ldpem generate [^`]*--part N[^`]*)`", text)
    return Section(shell_blocks(text, roles), request, generate)


def fenced(text: str, language: str) -> list[str]:
    """The ``language`` blocks of ``text``, list-item indentation removed."""
    found = re.findall(rf"^( *)```{language}\n(.*?)^\1```$", text, flags=re.MULTILINE | re.DOTALL)
    return [textwrap.dedent(block) for _, block in found]


def shell_blocks(text: str, roles: Mapping[str, str]) -> dict[str, str]:
    """Each ``sh`` block of ``text`` by its role, the role whose command (``roles``: role →
    how its block starts) it starts with. A block of no role, a role twice or a role
    missing fails the test, so that the section cannot grow a step its test does not run."""
    blocks: dict[str, str] = {}
    for block in fenced(text, "sh"):
        role = next((r for r, start in roles.items() if block.startswith(start)), None)
        assert role is not None and role not in blocks, f"unexpected block:\n{block}"
        blocks[role] = block
    assert sorted(blocks) == sorted(roles), sorted(blocks)
    return blocks


def environment() -> dict[str, str]:
    """This machine's environment without the tests' LDPEM_* settings (a document's
    commands must work without them), with ``ldpem`` on the PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDPEM_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


class Machines:
    """Shell blocks run in per-machine directories ``root/<machine>`` (made here); ``close``
    stops the long-running ones."""

    def __init__(self, root: Path, machines: list[str]) -> None:
        self.root = root
        for machine in machines:
            (root / machine).mkdir()
        self.env = environment()
        self.running: list[tuple[subprocess.Popen[bytes], Path]] = []

    def run(self, machine: str, block: str, *, timeout: float = 120) -> str:
        done = subprocess.run(
            ["bash", "-euc", block],
            cwd=self.root / machine,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert done.returncode == 0, f"{block}\nexit {done.returncode}\n{done.stderr}"
        return done.stdout

    def start(self, machine: str, block: str, *, stdout: bool = False) -> subprocess.Popen[bytes]:
        """``block`` in the background; its stderr (and stdout unless ``stdout``: then a
        pipe, for a command that prints little) to ``<machine>-<n>.log``."""
        log = self.root / f"{machine}-{len(self.running)}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                ["bash", "-euc", f"exec {block}"],
                cwd=self.root / machine,
                env=self.env,
                stdout=subprocess.PIPE if stdout else out,
                stderr=out,
                start_new_session=True,
            )
        self.running.append((process, log))
        return process

    def logs(self) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text()[-3000:]}" for _, log in self.running)

    def close(self) -> None:
        for process, _ in self.running:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)  # its own session: bash exec'd ldpem
        for process, _ in self.running:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)


def machines_fixture(machines: list[str]) -> Any:
    """A fixture ``machines``: ``Machines`` for ``machines`` in the test's ``tmp_path``,
    closed after the test (a module sets ``machines = machines_fixture([...])``)."""

    @pytest.fixture(name="machines")
    def fixture(tmp_path: Path) -> Iterator[Machines]:
        with contextlib.closing(Machines(tmp_path, machines)) as running:
            yield running

    return fixture


def wait_healthy(
    url: str,
    coordinator: subprocess.Popen[bytes],
    machines: Machines,
    *,
    verify: ssl.SSLContext | bool = True,
) -> None:
    """Until the coordinator started as ``coordinator`` answers ``url``/healthz."""
    deadline = time.monotonic() + 60
    while True:
        assert coordinator.poll() is None, f"the coordinator exited\n{machines.logs()}"
        try:
            if httpx.get(f"{url}/healthz", verify=verify, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"the coordinator did not start\n{machines.logs()}"
        time.sleep(0.2)


def check_followed_to_the_end(lines: list[str], *, rounds: int, d: int) -> None:
    """``run status --wait``'s output once the run finished: its final line, then the
    forecast's lines, and last the estimate with its confidence interval per coordinate
    (the coordinator's parametric bootstrap)."""
    assert re.fullmatch(rf"run \S+: finished after {rounds} of {rounds} rounds", lines[0]), lines
    assert all(re.match(r"run \S+: ", line) for line in lines[1 : -d - 2]), lines
    assert lines[-d - 2] == "estimate β̂ and its confidence intervals:", lines
    assert re.match(r"\d+% confidence region \(parametric bootstrap", lines[-d - 1]), lines
    assert all(line.startswith(f"  β[{j}] = ") for j, line in enumerate(lines[-d:])), lines


def follow_to_the_end(
    machines: Machines,
    status: subprocess.Popen[bytes],
    agents: list[subprocess.Popen[bytes]],
    *,
    timeout: float,
    rounds: int,
    d: int,
) -> None:
    """``status`` (the document's ``run status --wait``, its stdout a pipe) followed until
    the run finished, no agent failing meanwhile; its output as a finished run's
    (``check_followed_to_the_end``), and every agent exits 0."""
    deadline = time.monotonic() + timeout
    while status.poll() is None:
        failed = [a for a in agents if a.poll() not in (None, 0)]
        assert not failed, f"an agent exited {failed[0].returncode}\n{machines.logs()}"
        assert time.monotonic() < deadline, f"the run did not finish\n{machines.logs()}"
        time.sleep(0.5)
    assert status.returncode == 0, machines.logs()
    assert status.stdout is not None
    lines = status.stdout.read().decode().strip().splitlines()
    check_followed_to_the_end(lines, rounds=rounds, d=d)
    for agent in agents:
        assert agent.wait(60) == 0, machines.logs()
