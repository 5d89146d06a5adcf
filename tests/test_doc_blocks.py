"""Every shell block of README.md and docs/FEDERATED.md runs as pasted (issue 43).

A document's ``sh``/``bash``/``console`` blocks are run in order, verbatim, by one
``bash -euo pipefail`` in a fresh empty folder, with the installed ``ldpem`` on the PATH
and none of the tests' ``LDPEM_*`` settings: as an operator pastes them one after the other
into one terminal. Later blocks see the files, variables and background jobs of earlier
ones; a block that needs something from an earlier one says so in the prose above it.

A block that cannot run here by nature (a Docker engine, a database server, the
repository's own Makefile) carries ``<!-- not-run: REASON -->`` on the line right above
its fence. A shell block without the marker is run; a fence in a language the harness
does not know fails the test, so no block escapes by its spelling. When the blocks are
done, nothing they started may still be running: a try must clean up after itself.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from ldpem.cli import build_parser
from tests.dockit import ROOT, Block, fenced_blocks

DOCUMENTS = [ROOT / "README.md", ROOT / "docs" / "FEDERATED.md"]
SHELL = {"sh", "bash", "console"}
#: Fenced blocks that are not commands: data, code the Python tests run, plain output.
OTHER = {"", "json", "yaml", "sql", "python", "text", "toml"}
#: Seconds for all of one document's blocks (the harness's share of CI: about 4 minutes).
TIMEOUT = 200
#: Seconds for processes a document stopped to exit after its last block.
SETTLE = 15


def blocks(text: str, document: str) -> list[Block]:
    """The shell blocks of ``text`` in order. A fence of an unknown language, an empty
    ``not-run`` reason or a marker above anything but a shell block is an error."""
    found: list[Block] = []
    for block in fenced_blocks(text, document):
        if block.language in SHELL:
            found.append(block)
        elif block.language not in OTHER:
            where = f"{document}:{block.line}"
            raise ValueError(f"{where}: a ```{block.language} block: sh or marked")
        elif block.not_run is not None:
            where = f"{document}:{block.line - 1}"
            raise ValueError(f"{where}: a not-run marker above a non-shell block")
    return found


def commands(block: Block) -> str:
    """What a block runs: a ``console`` block's ``$ `` lines (and their continuations),
    the others whole."""
    if block.language != "console":
        return block.text
    kept: list[str] = []
    continued = False
    for line in block.text.splitlines():
        if continued or line.startswith("$ "):
            kept.append(line if continued else line[2:])
            continued = line.endswith("\\")
    return "\n".join(kept) + "\n"


def script(runnable: list[Block]) -> str:
    """The blocks one after the other, each announced on stderr by its place in the
    document, so that a failure names the block it happened in."""
    parts = []
    for block in runnable:
        parts.append(f"printf '\\n=== %s\\n' '{block.document}:{block.line}' >&2\n")
        parts.append(commands(block))
    return "".join(parts)


def test_blocks_are_found_marked_and_refused() -> None:
    text = (
        "intro\n\n```sh\necho one\n```\n\n<!-- not-run: needs docker -->\n```bash\n"
        "docker compose up\n```\n\n1. step\n\n   ```console\n   $ echo two \\\n"
        "   >   three\n   two three\n   ```\n\n```json\n{}\n```\n"
    )
    found = blocks(text, "doc.md")
    assert [(b.line, b.language, b.not_run) for b in found] == [
        (3, "sh", None),
        (8, "bash", "needs docker"),
        (14, "console", None),
    ]
    assert commands(found[2]) == "echo two \\\n>   three\n"
    for bad in (
        "```shell\nls\n```\n",  # an unknown language would escape the harness
        "<!-- not-run:  -->\n```sh\nls\n```\n",  # a marker without its reason
        "<!-- not-run: why -->\n```json\n{}\n```\n",  # a marker on a block that never runs
        "```sh\nls\n",  # an unclosed fence
    ):
        with pytest.raises(ValueError):
            blocks(bad, "doc.md")


def ldpem_commands(block: Block) -> list[list[str]]:
    """The words of each ``ldpem …`` command of a block, continuation lines joined."""
    joined = commands(block).replace("\\\n", " ")
    return [shlex.split(line)[1:] for line in joined.splitlines() if line.startswith("ldpem ")]


def test_marked_blocks_keep_their_reason_and_their_ldpem_commands_parse() -> None:
    """A block marked not-run says why, and its ``ldpem`` commands are still complete:
    they parse as the CLI parses them (a required option left out fails here)."""
    marked = [
        block
        for document in DOCUMENTS
        for block in blocks(document.read_text(), document.name)
        if block.not_run is not None
    ]
    assert marked, "no marked block: the docker and PostgreSQL examples are marked"
    for block in marked:
        assert block.not_run is not None and len(block.not_run.split()) >= 3, block
        for words in ldpem_commands(block):
            try:
                build_parser().parse_args(words)
            except SystemExit as exit:
                raise AssertionError(f"{block.document}:{block.line}: ldpem {words}") from exit


def environment() -> dict[str, str]:
    """This machine's environment without the tests' LDPEM_* settings (a document's
    commands must work without them), with the installed ``ldpem`` on the PATH (the
    directory of this Python's scripts: .venv/bin under ``make test``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDPEM_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def busy_ports(text: str) -> list[int]:
    """The ports the blocks serve or reach on this machine that something else listens on
    already (another coordinator would answer the blocks' requests in their place)."""
    ports = {int(p) for p in re.findall(r"(?:127\.0\.0\.1:|--port )(\d+)", text)}
    busy = []
    for port in sorted(ports):
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                busy.append(port)
    return busy


def state(pid: int) -> tuple[str, int] | None:
    """A process's state letter and process group, from /proc; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[2])


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for its parent to reap it."""
    found = state(pid)
    return found is not None and found[0] != "Z"


def running(group: int) -> list[int]:
    """The processes of process group ``group`` still alive."""
    pids = [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit()]
    return [pid for pid in pids if (found := state(pid)) and found[1] == group and alive(pid)]


def leftovers(group: int) -> bool:
    return bool(running(group))


@dataclass(frozen=True)
class Outcome:
    """How a run of blocks ended: bash's exit status (None: stopped at the timeout),
    whether processes it started were still running, and the tail of their output."""

    status: int | None
    left_running: bool
    output: str


def run_blocks(runnable: list[Block], folder: Path, *, timeout: float, settle: float) -> Outcome:
    """``runnable`` in one ``bash -euo pipefail`` in ``folder``/work (made empty here),
    then up to ``settle`` seconds for what they started to exit; whatever is left is
    killed."""
    work = folder / "work"
    work.mkdir()
    (folder / "blocks.sh").write_text(script(runnable))
    log = folder / "blocks.log"
    with log.open("wb") as out:
        shell = subprocess.Popen(
            ["bash", "-euo", "pipefail", str(folder / "blocks.sh")],
            cwd=work,
            env=environment(),
            stdin=subprocess.DEVNULL,  # a command reading stdin must not eat the script
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: whatever it started is in it
        )
    try:
        status: int | None = shell.wait(timeout)
    except subprocess.TimeoutExpired:
        status = None
    deadline = time.monotonic() + settle
    while leftovers(shell.pid) and status is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    left = leftovers(shell.pid)
    if left:
        os.killpg(shell.pid, signal.SIGKILL)
        shell.wait(10)
        killed = time.monotonic() + 10  # a signal is delivered when its process next runs
        while leftovers(shell.pid) and time.monotonic() < killed:
            time.sleep(0.05)
    return Outcome(status, left, log.read_text(errors="replace")[-6000:])


def test_the_harness_fails_a_failing_block_and_one_left_running(tmp_path: Path) -> None:
    def outcome(text: str, name: str) -> Outcome:
        (tmp_path / name).mkdir()
        return run_blocks(blocks(text, name), tmp_path / name, timeout=30, settle=1)

    fine = outcome("```sh\nx=1\necho > file\n```\n\n```sh\ncat file; echo $x\n```\n", "a")
    assert (fine.status, fine.left_running) == (0, False), fine.output
    unset = outcome("```sh\necho $NOT_SET_ANYWHERE\nexit 0\n```\n", "b")  # -u
    assert unset.status not in (None, 0) and "=== b:1" in unset.output, unset.output
    piped = outcome("```sh\nfalse | cat\nexit 0\n```\n", "c")  # pipefail
    assert piped.status not in (None, 0), piped.output
    left = outcome("```sh\nsleep 60 &\necho $! > ../sleeper\n```\n", "d")  # left running
    assert (left.status, left.left_running) == (0, True), left.output
    sleeper = int((tmp_path / "d" / "sleeper").read_text())
    assert not alive(sleeper)  # the harness killed it


@pytest.mark.slow
@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda d: d.name)
def test_every_shell_block_runs_as_pasted(document: Path, tmp_path: Path) -> None:
    name = str(document.relative_to(ROOT))
    runnable = [b for b in blocks(document.read_text(), name) if b.not_run is None]
    busy = busy_ports(script(runnable))
    assert not busy, f"{name}: its blocks need ports {busy}, which are in use on this machine"
    outcome = run_blocks(runnable, tmp_path, timeout=TIMEOUT, settle=SETTLE)
    output = outcome.output
    assert outcome.status is not None, f"{name}: the blocks did not end in {TIMEOUT} s\n{output}"
    assert outcome.status == 0, f"{name}: the last block announced failed\n{output}"
    assert not outcome.left_running, f"{name}: the blocks left processes running\n{output}"
