"""README "Running on separate machines", run as written: its shell blocks verbatim (the
host replaced by 127.0.0.1, the port by a free one), one directory per machine, three
hospitals, until the run finishes.

The only steps taken outside the blocks are the ones the section says in words: sending
each hospital its token file and ca.pem (saved as hospital.token and ca.pem), and the
synthetic records.csv of its part (the section's ``ldpem generate`` line, N = 1, 2, 3).
``ldpem`` is found on the PATH, as the section tells an operator to arrange: here the
directory of this Python's scripts (.venv/bin under ``make test``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ldpem.processes import free_port

pytestmark = pytest.mark.slow

README = Path(__file__).parents[2] / "README.md"
SECTION = "## Running on separate machines"
HOST, PORT = "coord.example", "8443"
HOSPITALS = ["a", "b", "c"]
#: Each block by the command it starts with; a README block of another kind fails the test,
#: so that the section cannot grow a step this test does not run.
ROLES = {
    "init": "ldpem coordinator init ",
    "coordinator": "ldpem coordinator --",
    "create": "ldpem run create ",
    "client": "ldpem client ",
    "status": "ldpem run status ",
}


def section() -> str:
    text = README.read_text()
    start = text.index(SECTION)
    end = text.index("\n## ", start + len(SECTION))
    return text[start:end]


def fenced(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)


def shell_blocks(text: str) -> dict[str, str]:
    blocks: dict[str, str] = {}
    for block in fenced(text, "sh"):
        role = next((r for r, start in ROLES.items() if block.startswith(start)), None)
        assert role is not None and role not in blocks, f"unexpected README block:\n{block}"
        blocks[role] = block
    assert sorted(blocks) == sorted(ROLES), sorted(blocks)
    return blocks


def one_line(block: str) -> str:
    """A block's command with its continuation lines joined and spaces collapsed."""
    return " ".join(block.replace("\\\n", " ").split())


def on_127(block: str, port: int) -> str:
    return block.replace(HOST, "127.0.0.1").replace(PORT, str(port)).replace("0.0.0.0", "127.0.0.1")


def environment() -> dict[str, str]:
    """This machine's environment without the tests' LDPEM_* settings (the section must
    work without them), with ``ldpem`` on the PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDPEM_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


class Machines:
    """Shell blocks run in per-machine directories; long-running ones stopped at the end."""

    def __init__(self, root: Path) -> None:
        self.root = root
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

    def stop(self) -> None:
        for process, _ in self.running:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)  # its own session: bash exec'd ldpem
        for process, _ in self.running:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)


@pytest.fixture
def machines(tmp_path: Path) -> Iterator[Machines]:
    for machine in ["coordinator", *HOSPITALS]:
        (tmp_path / machine).mkdir()
    running = Machines(tmp_path)
    try:
        yield running
    finally:
        running.stop()


def check_followed_to_the_end(lines: list[str], *, rounds: int, d: int) -> None:
    """``run status --wait``'s output once the run finished: its final line, then the
    forecast's lines, and last the estimate with its confidence interval per coordinate
    (the coordinator's parametric bootstrap)."""
    assert re.fullmatch(rf"run \S+: finished after {rounds} of {rounds} rounds", lines[0]), lines
    assert all(re.match(r"run \S+: ", line) for line in lines[1 : -d - 2]), lines
    assert lines[-d - 2] == "estimate β̂ and its confidence intervals:", lines
    assert re.match(r"\d+% confidence region \(parametric bootstrap", lines[-d - 1]), lines
    assert all(line.startswith(f"  β[{j}] = ") for j, line in enumerate(lines[-d:])), lines


def wait_healthy(url: str, ca: Path, coordinator: subprocess.Popen[bytes], m: Machines) -> None:
    trust = ssl.create_default_context(cafile=str(ca))
    deadline = time.monotonic() + 60
    while True:
        assert coordinator.poll() is None, f"the coordinator exited\n{m.logs()}"
        try:
            if httpx.get(f"{url}/healthz", verify=trust, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"the coordinator did not start\n{m.logs()}"
        time.sleep(0.2)


def test_the_readme_section_runs_as_written(machines: Machines) -> None:
    text = section()
    blocks = shell_blocks(text)
    (config,) = fenced(text, "json")
    (generate,) = re.findall(r"`(ldpem generate [^`]*--part N[^`]*)`", text)
    port = free_port()
    coordinator_dir = machines.root / "coordinator"

    init = machines.run("coordinator", on_127(blocks["init"], port))
    # The README's start command is the one init prints (for coord.example's port 8443).
    printed = [line.strip() for line in init.splitlines() if line.startswith("  ldpem ")]
    assert printed == [one_line(blocks["coordinator"])]
    coordinator = machines.start("coordinator", on_127(blocks["coordinator"], port))
    ca = coordinator_dir / "coord" / "ca.pem"
    wait_healthy(f"https://127.0.0.1:{port}", ca, coordinator, machines)

    (coordinator_dir / "run.json").write_text(config)
    json.loads(config)  # the README's run.json is valid JSON
    created = machines.run("coordinator", on_127(blocks["create"], port))
    agents = []
    for part, name in enumerate(HOSPITALS, start=1):
        token = coordinator_dir / "tokens" / f"{name}.token"
        assert re.search(rf"^  {name}\s+tokens/{name}.token$", created, re.MULTILINE), created
        hospital = machines.root / name
        shutil.copy(token, hospital / "hospital.token")  # "send each hospital its token file"
        shutil.copy(ca, hospital / "ca.pem")
        machines.run(name, generate.replace("--part N", f"--part {part}"))
        agents.append(machines.start(name, on_127(blocks["client"], port)))

    status = machines.start("coordinator", on_127(blocks["status"], port), stdout=True)
    deadline = time.monotonic() + 300
    while status.poll() is None:
        failed = [a for a in agents if a.poll() not in (None, 0)]
        assert not failed, f"an agent exited {failed[0].returncode}\n{machines.logs()}"
        assert time.monotonic() < deadline, f"the run did not finish\n{machines.logs()}"
        time.sleep(0.5)
    assert status.returncode == 0, machines.logs()
    assert status.stdout is not None
    lines = status.stdout.read().decode().strip().splitlines()
    request = json.loads(config)
    check_followed_to_the_end(lines, rounds=request["rounds"], d=request["d"])
    for agent in agents:
        assert agent.wait(60) == 0, machines.logs()
