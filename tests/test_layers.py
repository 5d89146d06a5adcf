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


#: The installed package's modules come from these folders (pyproject.toml's package-dir):
#: ``cli/`` is ``ldpem`` itself, the others keep their folder's name.
PACKAGES = {
    "cli": "ldpem",
    "common": "ldpem.common",
    "server": "ldpem.server",
    "client": "ldpem.client",
}


def _module_name(path: Path) -> str:
    """The dotted name a product file is imported as (``cli/commands/run.py`` →
    ``ldpem.commands.run``, ``common/models/__init__.py`` → ``ldpem.common.models``)."""
    folder, *rest = path.relative_to(ROOT).with_suffix("").parts
    name = ".".join([PACKAGES[folder], *rest])
    return name.removesuffix(".__init__")


def _all_imports(path: Path, modules: set[str]) -> set[str]:
    """Every ``ldpem`` module the file imports, wherever the import stands: at the top,
    inside a function (a lazy import still makes a circle when it runs) or under ``if
    TYPE_CHECKING:`` (mypy and every reader follow it; a circle there is a design one).
    ``from package import name`` counts as an import of ``package.name`` when that is one
    of ``modules``, else of ``package``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in modules else node.module)
    return {module for module in found if module in modules}


def _import_graph(folders: tuple[str, ...] = tuple(PACKAGES)) -> dict[str, set[str]]:
    """Module → the modules it imports, over the product files of ``folders``."""
    paths = sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))
    names = {_module_name(p): p for p in paths}
    return {name: _all_imports(path, set(names)) - {name} for name, path in names.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (as a path that ends where it starts), or None."""
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], node, nxt] if nxt in path else [node, nxt]
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


def _subpackages() -> list[str]:
    """Every package of the product: the four folders and each folder with an
    ``__init__.py`` below them (``common/models``, ``server/routes``, …)."""
    return sorted(
        p.parent.relative_to(ROOT).as_posix()
        for folder in PACKAGES
        for p in (ROOT / folder).rglob("__init__.py")
    )


@pytest.mark.parametrize("package", _subpackages())
def test_no_import_circle_within_a_package(package: str) -> None:
    graph = _import_graph((package.split("/")[0],))
    prefix = _module_name(ROOT / package / "__init__.py")
    inside = {m: {n for n in edges if n.startswith(prefix)} for m, edges in graph.items()}
    inside = {m: edges for m, edges in inside.items() if m.startswith(prefix)}
    assert inside
    circle = _cycle(inside)
    assert circle is None, f"import circle in {package}/: {' -> '.join(circle or [])}"


def test_no_import_circle_across_the_product() -> None:
    circle = _cycle(_import_graph())
    assert circle is None, f"import circle: {' -> '.join(circle or [])}"


def test_the_circle_check_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "z": {"a"}}
    assert _cycle(graph) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_scan_sees_lazy_and_type_checking_imports(tmp_path: Path) -> None:
    source = tmp_path / "x.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from ldpem.client.sources import Source\n"
        "def f():\n    from ldpem.common import wire\n    import ldpem.server.app\n"
    )
    modules = {"ldpem.client.sources", "ldpem.common.wire", "ldpem.common", "ldpem.server.app"}
    assert _all_imports(source, modules) == {
        "ldpem.client.sources",
        "ldpem.common.wire",
        "ldpem.server.app",
    }
