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
import re
import shutil
import ssl
from pathlib import Path

import pytest

from ldpem.processes import free_port
from tests.dockit import Machines, follow_to_the_end, machines_fixture, read_section, wait_healthy

pytestmark = pytest.mark.slow

README = Path(__file__).parents[2] / "README.md"
SECTION = "## Running on separate machines"
HOST, PORT = "coord.example", "8443"
HOSPITALS = ["a", "b", "c"]
#: Each block by the command it starts with (tests.dockit.shell_blocks).
ROLES = {
    "init": "ldpem coordinator init ",
    "coordinator": "ldpem coordinator --",
    "create": "ldpem run create ",
    "client": "ldpem client ",
    "status": "ldpem run status ",
}


def one_line(block: str) -> str:
    """A block's command with its continuation lines joined and spaces collapsed."""
    return " ".join(block.replace("\\\n", " ").split())


def on_127(block: str, port: int) -> str:
    return block.replace(HOST, "127.0.0.1").replace(PORT, str(port)).replace("0.0.0.0", "127.0.0.1")


machines = machines_fixture(["coordinator", *HOSPITALS])


def test_the_readme_section_runs_as_written(machines: Machines) -> None:
    readme = read_section(README, SECTION, ROLES)
    blocks, config = readme.blocks, readme.json
    port = free_port()
    coordinator_dir = machines.root / "coordinator"

    init = machines.run("coordinator", on_127(blocks["init"], port))
    # The README's start command is the one init prints (for coord.example's port 8443).
    printed = [line.strip() for line in init.splitlines() if line.startswith("  ldpem ")]
    assert printed == [one_line(blocks["coordinator"])]
    coordinator = machines.start("coordinator", on_127(blocks["coordinator"], port))
    ca = coordinator_dir / "coord" / "ca.pem"
    trust = ssl.create_default_context(cafile=str(ca))
    wait_healthy(f"https://127.0.0.1:{port}", coordinator, machines, verify=trust)

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
        machines.run(name, readme.generate.replace("--part N", f"--part {part}"))
        agents.append(machines.start(name, on_127(blocks["client"], port)))

    status = machines.start("coordinator", on_127(blocks["status"], port), stdout=True)
    request = json.loads(config)
    follow_to_the_end(
        machines, status, agents, timeout=300, rounds=request["rounds"], d=request["d"]
    )
