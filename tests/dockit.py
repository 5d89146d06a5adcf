"""Reading the repository's Markdown documents as the tests that run or check them need:
their fenced blocks, one section, and the two ways a Python example runs (a fresh
interpreter, or a module of its own in this one).

tests/test_doc_blocks.py runs the shell blocks, tests/cli/test_readme_in_python.py the
README's Python examples, tests/test_extension_guide.py the plugin guide's, and
tests/test_architecture_map.py checks the paths of the architecture map.
"""

from __future__ import annotations

import re
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: ``<!-- not-run: REASON -->`` on the line above a fence: a block that cannot run here.
NOT_RUN = re.compile(r"^\s*<!-- not-run: (?P<reason>.*\S) -->\s*$")
FENCE = re.compile(r"^(?P<indent> *)```(?P<language>[\w-]*)\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced block: the line of its opening fence (1-based), its language (empty when
    the fence names none), its text with the list indentation of its fence removed, the
    line of its closing fence and, when marked, why it is not run."""

    document: str
    line: int
    language: str
    text: str
    not_run: str | None
    end: int


def fenced_blocks(text: str, document: str) -> list[Block]:
    """Every fenced block of ``text`` in order. A fence never closed, or a ``not-run``
    marker that is not well formed, is a ValueError naming the line."""
    lines = text.splitlines()
    found: list[Block] = []
    number = 0
    while number < len(lines):
        fence = FENCE.match(lines[number])
        if fence is None:
            if "not-run" in lines[number] and NOT_RUN.match(lines[number]) is None:
                raise ValueError(f"{document}:{number + 1}: malformed not-run marker")
            number += 1
            continue
        indent, language = fence["indent"], fence["language"]
        closing = next(
            (i for i in range(number + 1, len(lines)) if lines[i] == f"{indent}```"), None
        )
        if closing is None:
            raise ValueError(f"{document}:{number + 1}: fence never closed")
        above = NOT_RUN.match(lines[number - 1]) if number > 0 else None
        body = "\n".join(line.removeprefix(indent) for line in lines[number + 1 : closing])
        reason = above["reason"] if above else None
        found.append(Block(document, number + 1, language, body + "\n", reason, closing + 1))
        number = closing + 1
    return found


def python_blocks(text: str, document: str) -> list[str]:
    """The code of each ```python block of ``text``, in order."""
    return [b.text for b in fenced_blocks(text, document) if b.language == "python"]


def section(text: str, heading: str, *, level: int = 2) -> str:
    """What stands under the heading ``heading`` of ``level`` (## for 2) up to the next
    heading of that level or higher; a KeyError when the document has no such heading."""
    marks = "#" * level
    lines = text.splitlines()
    try:
        start = lines.index(f"{marks} {heading}")
    except ValueError:
        raise KeyError(f"no heading {marks} {heading!r}") from None
    ends = re.compile(rf"^#{{1,{level}}} ")
    fenced = False  # a shell comment in a code block is not a heading
    for stop in range(start + 1, len(lines)):
        fenced ^= FENCE.match(lines[stop]) is not None
        if not fenced and ends.match(lines[stop]):
            break
    else:
        stop = len(lines)
    return "\n".join(lines[start + 1 : stop]) + "\n"


def subsections(text: str, *, level: int = 3) -> dict[str, str]:
    """Heading → text of each heading of ``level`` in ``text`` (a section, usually)."""
    parts = re.split(rf"^{'#' * level} (.*)$", text, flags=re.MULTILINE)
    return {heading.strip(): body for heading, body in zip(parts[1::2], parts[2::2], strict=True)}


def run_python(code: str, *, timeout: float = 120) -> str:
    """``code`` in a fresh interpreter (``python -c``); its standard output, once it has
    exited 0 (an AssertionError with the end of its standard error otherwise)."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def exec_block(code: str, *, filename: str, module: str) -> dict[str, Any]:
    """``code`` run in this interpreter as a module of its own named ``module`` (in
    ``sys.modules`` while it runs: a dataclass looks its module up); its namespace."""
    namespace = types.ModuleType(module)
    sys.modules[module] = namespace
    try:
        exec(compile(code, filename, "exec"), namespace.__dict__)
    finally:
        del sys.modules[module]
    return namespace.__dict__
