"""The layers import downwards only, and no module imports itself back: ``ldpem.common``,
``ldpem.server`` and ``ldpem.client`` never import the command-line package, the layers of
``common/`` and of ``cli/`` import their own and lower ones, and no import circle exists
anywhere, counting every import statement and every ``importlib.import_module("…")`` of a
module named in the source (docs/ARCHITECTURE.md)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LOWER = ("common", "server", "client")
#: What a lower layer may import from ``ldpem``: the layers and the package's version.
ALLOWED = {f"ldpem.{layer}" for layer in LOWER}


def imported_by_name(node: ast.AST) -> str | None:
    """The module that ``node`` imports by name, ``importlib.import_module("ldpem.cli")`` or
    ``import_module("ldpem.cli")`` with a string literal, else None: an import all the
    same, which the ``import`` statements alone would not show."""
    if not (isinstance(node, ast.Call) and node.args):
        return None
    function, first = node.func, node.args[0]
    named = (isinstance(function, ast.Attribute) and function.attr == "import_module") or (
        isinstance(function, ast.Name) and function.id == "import_module"
    )
    if named and isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    return None


def imported_ldpem_modules(path: Path) -> set[str]:
    """Modules under ``ldpem`` that the file imports (``from ldpem import x`` → ``ldpem.x``;
    ``importlib.import_module("ldpem.x")`` → ``ldpem.x``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if (name := imported_by_name(node)) is not None and name.startswith("ldpem"):
            found.add(name)
        elif isinstance(node, ast.Import):
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
        "import importlib\ndef f():\n    return importlib.import_module('ldpem.cli').main\n"
    )
    assert outside_the_layers(imported_ldpem_modules(source)) == [
        "ldpem.cli",
        "ldpem.demo",
        "ldpem.errors",
    ]


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
    TYPE_CHECKING:`` (mypy and every reader follow it; a circle there is a design one), and
    by name (``importlib.import_module("ldpem.cli")``, a circle hidden from the statements).
    ``from package import name`` counts as an import of ``package.name`` when that is one
    of ``modules``, else of ``package``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if (name := imported_by_name(node)) is not None:
            found.add(name)
        elif isinstance(node, ast.Import):
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


def test_the_scan_sees_lazy_type_checking_and_by_name_imports(tmp_path: Path) -> None:
    source = tmp_path / "x.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from ldpem.client.sources import Source\n"
        "def f():\n    from ldpem.common import wire\n    import ldpem.server.app\n"
        "def g():\n    return importlib.import_module('ldpem.cli').main\n"
        "def h(name):\n    return import_module(name)\n"
    )
    modules = {
        "ldpem.client.sources",
        "ldpem.common.wire",
        "ldpem.common",
        "ldpem.server.app",
        "ldpem.cli",
    }
    assert _all_imports(source, modules) == {
        "ldpem.client.sources",
        "ldpem.common.wire",
        "ldpem.server.app",
        "ldpem.cli",
    }


#: The layers of ``common/``, lowest first (docs/ARCHITECTURE.md, "Layers"): a module may
#: import its own layer and the layers of lower rank. The core's flat modules and infra
#: share the bottom rank without importing each other: the core does no I/O, infra knows no
#: maths. Above the flat modules, the models and the mechanisms (side by side), then the
#: protocol that drives both. The package ``ldpem.common`` itself is the facade above them.
LAYER_RANKS = {
    "core": 0,
    "infra": 0,
    "models": 1,
    "mechanisms": 1,
    "protocol": 2,
    "secagg": 3,
    "wire": 4,
    "planning": 5,
    "audit": 6,
}
FACADE_RANK = 7
#: The core's public plugin packages keep their paths (docs/EXTENDING.md cites them).
CORE_PACKAGES = ("models", "mechanisms", "protocol")
#: The core in the wide sense, the walk and its privacy: no pydantic, no I/O, so no infra.
CORE_LAYERS = ("core", *CORE_PACKAGES)
COMMON = PACKAGES["common"]


def layer_of(module: str) -> str | None:
    """The layer of a module of ``common/`` (None outside it). A flat module of
    ``common/`` that no layer claims counts as core: the strictest rules hold until it
    moves."""
    if module == COMMON:
        return "facade"
    if not module.startswith(f"{COMMON}."):
        return None
    top = module.removeprefix(f"{COMMON}.").split(".")[0]
    if top in LAYER_RANKS:
        return top
    return "core"  # any flat module


def _rank(layer: str) -> int:
    return FACADE_RANK if layer == "facade" else LAYER_RANKS[layer]


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import of ``graph`` that goes up or sideways between layers, named."""
    found = []
    for module, targets in sorted(graph.items()):
        low = layer_of(module)
        for target in sorted(targets):
            high = layer_of(target)
            if low is None or high is None or high == low:
                continue
            if _rank(high) >= _rank(low) or (low in CORE_LAYERS and high == "infra"):
                found.append(f"{module} ({low}) imports {target} ({high})")
    return found


def test_every_flat_module_of_common_has_a_layer() -> None:
    flat = sorted(p.name for p in (ROOT / "common").glob("*.py") if p.name != "__init__.py")
    assert flat == [], "move these into a layer's package (docs/ARCHITECTURE.md)"
    packages = {p.parent.name for p in (ROOT / "common").glob("*/__init__.py")}
    assert packages == set(LAYER_RANKS) | set(CORE_PACKAGES)


def test_the_layers_of_common_import_downwards_only() -> None:
    assert layer_violations(_import_graph()) == []


def test_the_layer_check_names_an_upward_import() -> None:
    core, wire, plan = (f"{COMMON}.{name}" for name in ("core.x", "wire.y", "planning.z"))
    graph = {
        core: {wire},
        wire: {core, f"{COMMON}.secagg.k"},
        plan: {wire, COMMON},
        f"{COMMON}.mechanisms.m": {f"{COMMON}.infra.logs", f"{COMMON}.models.g"},
        f"{COMMON}.core.rounds": {f"{COMMON}.mechanisms.m", f"{COMMON}.core.v"},
        f"{COMMON}.protocol.p": {f"{COMMON}.mechanisms.m", f"{COMMON}.models.g"},
        f"{COMMON}.flat": {plan},
        COMMON: {plan},
    }
    assert layer_violations(graph) == [
        f"{COMMON}.core.rounds (core) imports {COMMON}.mechanisms.m (mechanisms)",
        f"{core} (core) imports {wire} (wire)",
        f"{COMMON}.flat (core) imports {plan} (planning)",
        f"{COMMON}.mechanisms.m (mechanisms) imports {COMMON}.infra.logs (infra)",
        f"{COMMON}.mechanisms.m (mechanisms) imports {COMMON}.models.g (models)",
        f"{plan} (planning) imports {COMMON} (facade)",
    ]


#: The command line's own layers, lowest first: the helpers the commands share or own
#: (``ldpem.processes``, ``ldpem.run``, ``ldpem.demo``, …), the commands, then the entry
#: point that builds their parser (and ``python -m ldpem``, which runs it). The entry point
#: is handed down where a helper needs it (the demo's forked children), never imported.
COMMAND_LINE_RANKS = {"helper": 0, "command": 1, "entry": 2}


def command_line_layer(module: str) -> str | None:
    """The layer of a module of ``cli/`` (None outside it)."""
    if module in {"ldpem.cli", "ldpem.__main__"}:
        return "entry"
    if module == "ldpem.commands" or module.startswith("ldpem.commands."):
        return "command"
    if any(module == p or module.startswith(f"{p}.") for p in PACKAGES.values() if p != "ldpem"):
        return None
    return "helper"


def command_line_violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import of ``graph`` from a layer of ``cli/`` to a higher one, named."""
    found = []
    for module, targets in sorted(graph.items()):
        low = command_line_layer(module)
        for target in sorted(targets):
            high = command_line_layer(target)
            if low and high and COMMAND_LINE_RANKS[high] > COMMAND_LINE_RANKS[low]:
                found.append(f"{module} ({low}) imports {target} ({high})")
    return found


def test_the_command_line_imports_downwards_only() -> None:
    assert command_line_violations(_import_graph()) == []


def test_the_command_line_check_names_an_upward_import() -> None:
    graph = {
        "ldpem.demo.forkstart": {"ldpem.cli", "ldpem.processes"},
        "ldpem.run.watch": {"ldpem.commands.run", "ldpem.common.wire"},
        "ldpem.commands.demo": {"ldpem.demo.runner", "ldpem.commands.plan", "ldpem.cli"},
        "ldpem.cli": {"ldpem.commands.demo", "ldpem.options"},
    }
    assert command_line_violations(graph) == [
        "ldpem.commands.demo (command) imports ldpem.cli (entry)",
        "ldpem.demo.forkstart (helper) imports ldpem.cli (entry)",
        "ldpem.run.watch (helper) imports ldpem.commands.run (command)",
    ]


def _imports_pydantic(path: Path) -> bool:
    """Whether the file imports pydantic anywhere (top, function, TYPE_CHECKING)."""
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        if any(name.split(".")[0] in {"pydantic", "pydantic_core"} for name in names):
            return True
    return False


def pydantic_paths(graph: dict[str, set[str]], importers: set[str]) -> list[str]:
    """For each core module that reaches a pydantic importer through ``graph``, the chain."""
    found = []
    for start in sorted(m for m in graph if layer_of(m) in CORE_LAYERS):
        seen, queue = {start}, [[start]]
        while queue:
            path = queue.pop(0)
            if path[-1] in importers:
                found.append(" -> ".join([*path, "pydantic"]))
                break
            for nxt in sorted(graph.get(path[-1], ())):
                if nxt not in seen:
                    seen.add(nxt)
                    queue.append([*path, nxt])
    return found


def test_the_core_imports_no_pydantic() -> None:
    paths = sorted(p for folder in PACKAGES for p in (ROOT / folder).rglob("*.py"))
    importers = {_module_name(p) for p in paths if _imports_pydantic(p)}
    assert importers  # the wire does
    assert pydantic_paths(_import_graph(), importers) == []


def test_the_pydantic_check_follows_the_imports() -> None:
    core, wire = f"{COMMON}.core.sim", f"{COMMON}.wire"
    graph = {core: {f"{COMMON}.core.x"}, f"{COMMON}.core.x": {wire}, wire: set()}
    assert pydantic_paths(graph, {wire}) == [
        f"{core} -> {COMMON}.core.x -> {wire} -> pydantic",
        f"{COMMON}.core.x -> {wire} -> pydantic",
    ]


def test_importing_the_core_loads_no_pydantic_and_no_higher_layer() -> None:
    """At run time too: the facade ``ldpem.common`` (run before any core module) names its
    surface lazily, so a process that needs only the walk loads no schema or planner."""
    core = [f"{COMMON}.{p}" for p in CORE_PACKAGES] + [
        f"{COMMON}.core.{p.stem}" for p in sorted((ROOT / "common" / "core").glob("[!_]*.py"))
    ]
    code = (
        "import importlib, sys\n"
        f"for m in {core!r}: importlib.import_module(m)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pydantic'"
        f" or m.split('.')[:3] in ([{COMMON.split('.')!r}[0], 'common', x] for x in"
        f" {sorted(set(LAYER_RANKS) - set(CORE_LAYERS))!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
