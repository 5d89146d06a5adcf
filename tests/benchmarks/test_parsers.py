"""Every benchmark's command line refuses a prefix of an option (issue 43, finding 13): a
typo such as ``--seed`` for ``--seeds`` must be an error, not silently another option."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _parser_calls(path: Path) -> list[ast.Call]:
    """The ``argparse.ArgumentParser(...)`` calls in one script."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "ArgumentParser"
    ]


SCRIPTS = sorted(path for path in BENCHMARKS.glob("*.py") if _parser_calls(path))


def test_the_benchmarks_have_command_lines() -> None:
    """The scan below must see the scripts it guards (a moved folder would empty it)."""
    assert len(SCRIPTS) >= 15, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_every_benchmark_parser_refuses_abbreviations(script: Path) -> None:
    for call in _parser_calls(script):
        flags = {kw.arg: kw.value for kw in call.keywords}
        value = flags.get("allow_abbrev")
        assert isinstance(value, ast.Constant) and value.value is False, (
            f"{script.name}:{call.lineno}: ArgumentParser without allow_abbrev=False"
        )
