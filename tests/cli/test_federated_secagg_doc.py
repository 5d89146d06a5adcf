"""docs/FEDERATED.md "Secure aggregation (`secagg`): the operator's steps", run as written
(issue 32): its shell blocks verbatim, one directory per machine (the coordinator's, which
also keeps the consortium's roster, and one per holder), until the run finishes.

The commands are read from the document, so that a change of the protocol's parameters
is a change of the document only. What the section says in words is done here: each holder
runs the key block under its own name and sends its printed line, which replaces its
``NAME=PUBKEY`` in the roster block; ``roster.json`` and each holder's token file
(``tokens/hospital-a.token`` saved as ``hospital-a.token``) are copied to the holders;
each holder writes its records with the section's ``ldpem generate`` line. The port
8765 becomes a free one.
"""

from __future__ import annotations

import json
import re
import shutil
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ldpem.processes import free_port
from tests.cli.test_readme_separate_machines import Machines, check_followed_to_the_end

pytestmark = pytest.mark.slow

DOC = Path(__file__).parents[2] / "docs" / "FEDERATED.md"
SECTION = "## Secure aggregation (`secagg`): the operator's steps"
HOLDERS = ["hospital-a", "hospital-b", "hospital-c"]
#: The holder whose name the section's per-holder commands are written with.
WRITTEN_FOR = "hospital-a"
PORT = "8765"
#: Each block by the command it starts with; a block of another kind fails the test, so
#: that the section cannot grow a step this test does not run.
ROLES = {
    "keys": "ldpem keys generate ",
    "roster": "ldpem keys roster ",
    "init": "ldpem coordinator init ",
    "coordinator": "ldpem coordinator --",
    "create": "ldpem run create ",
    "client": "ldpem client ",
    "status": "ldpem run status ",
}


def section() -> str:
    text = DOC.read_text()
    start = text.index(SECTION)
    end = text.index("\n## ", start + len(SECTION))
    return text[start:end]


def fenced(text: str, language: str) -> list[str]:
    """The section's ``language`` blocks, list-item indentation removed."""
    found = re.findall(rf"^( *)```{language}\n(.*?)^\1```$", text, flags=re.MULTILINE | re.DOTALL)
    return [textwrap.dedent(block) for _, block in found]


def shell_blocks(text: str) -> dict[str, str]:
    blocks: dict[str, str] = {}
    for block in fenced(text, "sh"):
        role = next((r for r, start in ROLES.items() if block.startswith(start)), None)
        assert role is not None and role not in blocks, f"unexpected block:\n{block}"
        blocks[role] = block
    assert sorted(blocks) == sorted(ROLES), sorted(blocks)
    return blocks


@pytest.fixture
def machines(tmp_path: Path) -> Iterator[Machines]:
    for machine in ["coordinator", *HOLDERS]:
        (tmp_path / machine).mkdir()
    running = Machines(tmp_path)
    try:
        yield running
    finally:
        running.stop()


def wait_healthy(url: str, machines: Machines) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"the coordinator did not start\n{machines.logs()}"
        time.sleep(0.2)


def test_the_secagg_section_runs_as_written(machines: Machines) -> None:
    text = section()
    blocks = shell_blocks(text)
    (request,) = fenced(text, "json")
    (generate,) = re.findall(r"`(ldpem generate [^`]*--part N[^`]*)`", text)
    port = str(free_port())
    coordinator = machines.root / "coordinator"

    def holder(block: str, name: str) -> str:
        return block.replace(WRITTEN_FOR, name)

    # 1. Each holder's key, and the roster line it prints.
    lines = {}
    for name in HOLDERS:
        printed = machines.run(name, holder(blocks["keys"], name))
        lines[name] = printed.splitlines()[0]
        assert lines[name].startswith(f"{name}="), printed
    # 2. The consortium's roster from those lines; its digest is printed.
    roster = re.sub(r"(hospital-\w)=PUBKEY", lambda m: lines[m.group(1)], blocks["roster"])
    assert roster != blocks["roster"]
    shown = machines.run("coordinator", roster)
    assert re.search(r"^roster digest \S+, 3 holders$", shown, re.MULTILINE), shown
    # 3. The coordinator and the run.
    machines.run("coordinator", blocks["init"])
    started = machines.start("coordinator", blocks["coordinator"].replace(PORT, port))
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, machines)
    assert started.poll() is None
    json.loads(request)  # the section's request is valid JSON
    (coordinator / "secagg.json").write_text(request)
    created = machines.run("coordinator", blocks["create"].replace(PORT, port))
    assert "rounds, mechanism secagg" in created and "delta 1e-06" in created, created
    # 4. The agents, each on its holder's machine.
    agents = []
    for part, name in enumerate(HOLDERS, start=1):
        machine = machines.root / name
        shutil.copy(coordinator / "roster.json", machine / "roster.json")
        shutil.copy(coordinator / "tokens" / f"{name}.token", machine / f"{name}.token")
        machines.run(name, holder(generate, name).replace("--part N", f"--part {part}"))
        agents.append(machines.start(name, holder(blocks["client"], name).replace(PORT, port)))
    # 5. The run followed to its end: its final line, the forecast, the estimate.
    status = machines.start("coordinator", blocks["status"].replace(PORT, port), stdout=True)
    deadline = time.monotonic() + 240
    while status.poll() is None:
        failed = [a for a in agents if a.poll() not in (None, 0)]
        assert not failed, f"an agent exited {failed[0].returncode}\n{machines.logs()}"
        assert time.monotonic() < deadline, f"the run did not finish\n{machines.logs()}"
        time.sleep(0.5)
    assert status.returncode == 0, machines.logs()
    assert status.stdout is not None
    final = status.stdout.read().decode().strip().splitlines()
    values = json.loads(request)
    check_followed_to_the_end(final, rounds=values["rounds"], d=values["d"])
    for agent in agents:
        assert agent.wait(60) == 0, machines.logs()
