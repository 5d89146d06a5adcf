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


def _runtime_imports(path: Path) -> set[str]:
    """``imported_ldpem_modules`` without the imports under ``if TYPE_CHECKING:`` (they
    never run, so they make no circle), lazy imports inside functions included."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            node.body = []
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def _import_graph(layer: str) -> dict[str, set[str]]:
    """Module → the modules of the same layer it imports at run time, anywhere in the file
    (a lazy import inside a function still makes a circle)."""
    package = f"ldpem.{layer}"
    graph: dict[str, set[str]] = {}
    for path in sorted((ROOT / layer).rglob("*.py")):
        name = ".".join([package, *path.relative_to(ROOT / layer).with_suffix("").parts])
        graph[name.removesuffix(".__init__")] = {
            module for module in _runtime_imports(path) if module.startswith(package)
        }
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (as a path), or None."""
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path, node, nxt]
            if nxt in graph and nxt not in state:
                found = visit(nxt, [*path, node])
                if found:
                    return found
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node, [])
            if found:
                return found
    return None


@pytest.mark.parametrize("layer", ["client", "server"])
def test_no_import_circle_within_a_layer(layer: str) -> None:
    assert _cycle(_import_graph(layer)) is None


def test_the_circle_check_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}}
    assert _cycle(graph) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
