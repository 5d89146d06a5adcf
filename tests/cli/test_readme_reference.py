"""README.md's "Command reference" lists every option of every subcommand (issue 43,
finding 10), and no option a subcommand does not have: the parser the CLI builds is walked
(tests/cli/test_help_tree.py) and compared with the synopses of the table's first column.
"""

from __future__ import annotations

import argparse
import re

import pytest

from tests.cli.test_help_tree import PARSERS, options
from tests.dockit import ROOT, section

README = ROOT / "README.md"
#: The subcommands that run something: all but the groups that only choose one (``ldpem
#: run``; ``ldpem coordinator`` serves, and has ``init`` beside).
LEAVES = [
    p
    for p in PARSERS[1:]
    if options(p) or not any(isinstance(a, argparse._SubParsersAction) for a in p._actions)
]
PROGS = sorted((p.prog for p in LEAVES), key=len, reverse=True)


def synopses() -> dict[str, str]:
    """Each subcommand's synopsis in the table: the code spans of the first column that
    start with ``ldpem``, by the longest subcommand name they start with."""
    found: dict[str, str] = {}
    for row in section(README.read_text(), "Command reference").splitlines():
        if not row.startswith("| `ldpem"):
            continue
        first = re.split(r"(?<!\\)\|", row)[1]
        for span in re.findall(r"`([^`]+)`", first):
            prog = next((p for p in PROGS if span == p or span.startswith(p + " ")), None)
            assert prog is not None, f"no subcommand of ldpem is {span!r}"
            assert prog not in found, f"{prog} has two synopses"
            found[prog] = span
    return found


def flags(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in options(parser) for s in a.option_strings if s.startswith("--")}


def test_every_subcommand_has_a_synopsis() -> None:
    assert sorted(synopses()) == sorted(PROGS)


@pytest.mark.parametrize("parser", LEAVES, ids=[p.prog for p in LEAVES])
def test_the_synopsis_lists_every_option_and_no_other(parser: argparse.ArgumentParser) -> None:
    synopsis = synopses().get(parser.prog, "")
    listed = set(re.findall(r"(?<![\w-])--[a-z][\w-]*", synopsis))
    assert sorted(flags(parser) - listed) == [], f"{parser.prog}: missing in README.md"
    assert sorted(listed - flags(parser)) == [], f"{parser.prog}: README.md lists unknown"
