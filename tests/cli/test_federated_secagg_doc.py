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
from pathlib import Path

import pytest

from ldpem.processes import free_port
from tests.dockit import Machines, follow_to_the_end, machines_fixture, read_section, wait_healthy

pytestmark = pytest.mark.slow

DOC = Path(__file__).parents[2] / "docs" / "FEDERATED.md"
SECTION = "## Secure aggregation (`secagg`): the operator's steps"
HOLDERS = ["hospital-a", "hospital-b", "hospital-c"]
#: The holder whose name the section's per-holder commands are written with.
WRITTEN_FOR = "hospital-a"
PORT = "8765"
#: Each block by the command it starts with (tests.dockit.shell_blocks).
ROLES = {
    "keys": "ldpem keys generate ",
    "roster": "ldpem keys roster ",
    "init": "ldpem coordinator init ",
    "coordinator": "ldpem coordinator --",
    "create": "ldpem run create ",
    "client": "ldpem client ",
    "status": "ldpem run status ",
}


machines = machines_fixture(["coordinator", *HOLDERS])


def test_the_secagg_section_runs_as_written(machines: Machines) -> None:
    doc = read_section(DOC, SECTION, ROLES)
    blocks, request = doc.blocks, doc.json
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
    wait_healthy(url, started, machines)
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
        machines.run(name, holder(doc.generate, name).replace("--part N", f"--part {part}"))
        agents.append(machines.start(name, holder(blocks["client"], name).replace(PORT, port)))
    # 5. The run followed to its end: its final line, the forecast, the estimate.
    status = machines.start("coordinator", blocks["status"].replace(PORT, port), stdout=True)
    values = json.loads(request)
    follow_to_the_end(machines, status, agents, timeout=240, rounds=values["rounds"], d=values["d"])
