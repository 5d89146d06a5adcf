"""The layers import downwards only: ``ldpem.common``, ``ldpem.server`` and ``ldpem.client``
never import the command-line package (``ldpem.<command module>``), docs/ARCHITECTURE.md."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LOWER = ("common", "server", "client")
#: What a lower layer may import from ``ldpem``: the layers and the package's version.
ALLOWED = {f"ldpem.{layer}" for layer in LOWER}


def imported_ldpem_modules(path: Path) -> set[str]:
    """Modules under ``ldpem`` that the file imports (``from ldpem import x`` → ``ldpem.x``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("ldpem"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "ldpem":
                found.update(f"ldpem.{a.name}" for a in node.names)
            elif node.module.startswith("ldpem."):
                found.add(node.module)
    return found


def outside_the_layers(modules: set[str]) -> list[str]:
    return sorted(
        m
        for m in modules
        if m != "ldpem.__version__" and not any(m == a or m.startswith(f"{a}.") for a in ALLOWED)
    )


@pytest.mark.parametrize("layer", LOWER)
def test_lower_layers_do_not_import_the_command_line(layer: str) -> None:
    files = sorted((ROOT / layer).rglob("*.py"))
    assert files
    offending = {
        str(f.relative_to(ROOT)): bad
        for f in files
        if (bad := outside_the_layers(imported_ldpem_modules(f)))
    }
    assert offending == {}


def test_the_check_sees_a_command_line_import(tmp_path: Path) -> None:
    source = tmp_path / "x.py"
    source.write_text(
        "import ldpem.demo\nfrom ldpem import errors, __version__\nfrom ldpem.common import wire\n"
    )
    assert outside_the_layers(imported_ldpem_modules(source)) == ["ldpem.demo", "ldpem.errors"]
