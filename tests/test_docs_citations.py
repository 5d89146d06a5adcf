"""Docs that cannot go stale (issue 30): every repository path and every code name of ours
cited in README.md and docs/*.md exists in the repository.

* A **path** is a file or folder of the repository named from its root — `server/secagg/rounds.py`,
  `tests/cli/`, `docs/MATH.md`, a glob such as `tests/test_extension_*.py` (it must match),
  with an optional `::test_name` or `:line` — or a Markdown link's target, read from the
  citing file's folder. Paths are found in backticks and in running text.
* A **code name** is a backticked Python name that can only be ours: a dotted name whose first
  part is one of our modules or classes (`protocol.m_step`, `Mechanism.with_noise`,
  `ldpem.common.planning.executor`), a `CamelCase` name, a `_private` name, a `snake_case` name
  with an underscore or an `UPPER_CASE` constant. It must be defined, read as an
  attribute, passed as a keyword or written as a string (a JSON key, an environment
  variable) somewhere in the product's, the tests' or the benchmarks' sources, read with
  ``ast``; a dotted one must resolve part by part where its first part is our module.

Names that are not ours (third-party and standard-library names, shell words) are in the
small ``NOT_OURS`` and ``FOREIGN_ROOTS`` below, each with its reason. The failure lists
every stale citation as ``file:line: citation (why)``.
"""

from __future__ import annotations

import ast
import builtins
import os
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
#: Where our names are defined: the product, the tests and the benchmarks.
SOURCES = ("cli", "common", "server", "client", "tests", "benchmarks")
#: The folders and files of the repository a path may start with.
TOP = (
    "cli", "common", "server", "client", "tests", "benchmarks", "docs", "deploy",
    "requirements",
)  # fmt: skip
#: The installed package's module prefixes and the folders they come from (pyproject.toml).
PACKAGES = {"ldpem.common": "common", "ldpem.server": "server", "ldpem.client": "client"}

#: First parts of dotted names that are not ours, each a library the docs cite.
FOREIGN_ROOTS = {
    "np": "numpy",
    "numpy": "numpy",
    "math": "standard library",
    "os": "standard library",
    "secrets": "standard library",
    "concurrent": "standard library",
    "multiprocessing": "standard library",
    "asyncio": "standard library",
    "sqlite3": "standard library",
    "hashlib": "standard library",
    "hmac": "standard library",
    "json": "standard library",
    "scipy": "SciPy",
    "dp_accounting": "Google's dp_accounting (the audit's yardstick is checked against it)",
    "cryptography": "the cryptography package",
    "distributed": "Dask distributed",
    "dask": "Dask",
    "pydantic": "pydantic",
    "httpx": "httpx",
    "uvicorn": "uvicorn",
    "psycopg": "psycopg",
    "pyarrow": "pyarrow",
    "pytest": "pytest",
}
#: Backticked names that look like ours but are not, each with its reason.
NOT_OURS = {
    "DpEvent": "dp_accounting's privacy event class, cited as a model (issue 30)",
    "FastAPI": "the web framework",
    "ProcessPoolExecutor": "concurrent.futures",
    "PGPASSWORD": "libpq's environment variable",
    "PGPASSFILE": "libpq's environment variable",
    "PGSERVICE": "libpq's environment variable",
    "SIGKILL": "a POSIX signal",
    "SIGTERM": "a POSIX signal",
    "SIGINT": "a POSIX signal",
    "PYTHONPATH": "Python's environment variable",
    "ComplexWarning": "NumPy's warning class",
    "credentials_file": "a key of Prometheus's scrape configuration",
    "process_cpu_seconds_total": "a metric of prometheus_client's process collector",
    "process_virtual_memory_bytes": "a metric of prometheus_client's process collector",
    "process_max_fds": "a metric of prometheus_client's process collector",
    "machine.when": "a key of the dict the benchmarks' machine() returns, not server/machine.py",
    "machine.loadavg": "a key of the dict the benchmarks' machine() returns",
    "hospital.token": "the file an operator keeps a hospital's token in",
    "secagg.json": "the run request docs/FEDERATED.md's secagg operator writes",
    "pg_service.conf": "libpq's service file",
}
#: A bare file name of these kinds must be a file of the repository (anywhere in it); other
#: bare file names (``records.csv``, ``roster.json``) are files a user makes.
REPOSITORY_FILES = ("py", "md")

_FENCE = re.compile(r"^\s*(```|~~~)")
_SPAN = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_PATH = re.compile(
    r"(?<![\w./-])((?:" + "|".join(TOP) + r")/[\w.*/{},-]*[\w/*}])(?:::[\w\[\]-]+|:\d+)?"
)
_FILE_NAME = re.compile(r"[\w-]+(?:\.[\w-]+)*\.(" + "|".join(REPOSITORY_FILES) + ")")
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


def _citations(path: Path) -> list[tuple[int, str, str]]:
    """(line, kind, text) of every citation in ``path``: "path" (from the root), "link"
    (from the file's folder) and "span" (a backticked text), outside fenced code."""
    found: list[tuple[int, str, str]] = []
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        found += [(number, "path", m.group(1)) for m in _PATH.finditer(line)]
        found += [(number, "link", m.group(1)) for m in _LINK.finditer(line)]
        found += [(number, "span", m.group(1)) for m in _SPAN.finditer(line)]
    return found


def _expanded(text: str) -> list[str]:
    """A shell brace expansion: ``a-{x,y}.csv`` → ``a-x.csv``, ``a-y.csv``."""
    match = re.search(r"\{([^{}]*)\}", text)
    if match is None:
        return [text]
    head, tail = text[: match.start()], text[match.end() :]
    return [e for part in match.group(1).split(",") for e in _expanded(head + part + tail)]


def _path_exists(text: str, base: Path) -> bool:
    text = text.split("#")[0].rstrip("/")
    if not text:
        return True
    for each in _expanded(text):
        if not (any(base.glob(each)) if any(c in each for c in "*?[") else (base / each).exists()):
            return False
    return True


@cache
def _repository_files() -> frozenset[str]:
    """The names of the repository's files, hidden folders (.git, .venv) not entered."""
    names: set[str] = set()
    for _folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = [s for s in subfolders if not s.startswith(".")]
        names.update(files)
    return frozenset(names)


@cache
def _module_files() -> dict[str, Path]:
    """Every module of ours by dotted name (``ldpem.common.wire``) and by each dotted tail
    (``common.wire``, ``wire``; the last file wins a shared tail)."""
    files: dict[str, Path] = {}
    for folder in ("cli", "common", "server", "client"):
        for file in sorted((ROOT / folder).rglob("*.py")):
            parts = list(file.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            full = ["ldpem", *parts[1:]] if parts[0] == "cli" else ["ldpem", *parts]
            for start in range(len(full)):
                files.setdefault(".".join(full[start:]), file)
    return files


@cache
def _tree(file: Path) -> ast.Module:
    return ast.parse(file.read_text(encoding="utf-8"), filename=str(file))


def _defined_in(file: Path) -> set[str]:
    """Names a module defines or imports at any depth (functions, classes, assignments,
    annotated fields, imports; ``from ldpem.x import *``: what ``ldpem.x`` defines)."""
    names: set[str] = set()
    for node in ast.walk(_tree(file)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.ImportFrom) and [a.name for a in node.names] == ["*"]:
            names |= _defined_in(_module_files()[str(node.module)])
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


@cache
def _known_names() -> frozenset[str]:
    """Every name our sources define, read or pass, and every word they write in a string
    (a JSON key, a metric, an environment variable); this file is left out (it plants
    stale names)."""
    names: set[str] = set(dir(builtins))
    for folder in SOURCES:
        for file in (ROOT / folder).rglob("*.py"):
            if file == Path(__file__).resolve():
                continue
            names |= _defined_in(file)
            for node in ast.walk(_tree(file)):
                if isinstance(node, ast.Attribute):
                    names.add(node.attr)
                elif isinstance(node, (ast.arg, ast.keyword)) and node.arg is not None:
                    names.add(node.arg)
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    names.update(re.findall(r"[A-Za-z_]\w*", node.value))
    return frozenset(names)


@cache
def _classes() -> frozenset[str]:
    return frozenset(
        node.name
        for folder in ("cli", "common", "server", "client")
        for file in (ROOT / folder).rglob("*.py")
        for node in ast.walk(_tree(file))
        if isinstance(node, ast.ClassDef)
    )


def _looks_ours(name: str) -> bool:
    last = name.split(".")[-1]
    return bool(
        "." in name
        or re.fullmatch(r"_[A-Za-z]\w*", last)
        or re.fullmatch(r"[A-Z][a-z0-9]+[A-Z]\w*", last)  # CamelCase
        or re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+)+", last)  # snake_case
        or re.fullmatch(r"[A-Z][A-Z0-9]*(_[A-Z0-9]+)+", last)  # UPPER_CASE
    )


def _name_problem(text: str) -> str | None:
    """Why the backticked ``text`` is a stale code name, or None (fine, or not a name)."""
    name = re.sub(r"\(.*\)$", "", text.strip())  # `f(x)`, `f()`: the function f
    if _FILE_NAME.fullmatch(name):
        return None if name in _repository_files() else "no such file in the repository"
    if re.fullmatch(r"LDPEM_[A-Z0-9_]+", name):
        # An environment variable: LDPEM_ and a setting's or an option's name.
        known = name in _known_names() or name[6:].lower() in _known_names()
        return None if known else "no setting or option of that name"
    if not _IDENTIFIER.fullmatch(name) or not _looks_ours(name) or name in NOT_OURS:
        return None
    parts = name.split(".")
    if parts[0] in FOREIGN_ROOTS:
        return None
    if len(parts) == 1:
        return None if name in _known_names() else "not a name of ours"
    modules = _module_files()
    # The longest leading part that is our module; the rest must be defined in it.
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if module in modules:
            rest = parts[cut:]
            if not rest:
                return None
            if rest[0] in _defined_in(modules[module]) or rest[0] in _submodules(module):
                return None if all(p in _known_names() for p in rest[1:]) else "no such name"
            return f"{module} defines no {rest[0]}"
    if parts[0] in _classes():
        return None if all(p in _known_names() for p in parts[1:]) else "no such attribute"
    if parts[0] == "ldpem":
        return "no such module"
    return None if all(p in _known_names() for p in parts) else "not a name of ours"


def _submodules(module: str) -> set[str]:
    prefix = f"{module}."
    return {m[len(prefix) :].split(".")[0] for m in _module_files() if m.startswith(prefix)}


def stale_citations(doc: Path) -> list[str]:
    """``file:line: citation (why)`` for each stale citation of ``doc``."""
    where = doc.relative_to(ROOT).as_posix() if doc.is_relative_to(ROOT) else doc.name
    stale = []
    for line, kind, text in _citations(doc):
        problem: str | None = None
        if kind == "path":
            problem = None if _path_exists(text, ROOT) else "no such path"
        elif kind == "link":
            if not re.match(r"[a-z]+:|#", text) and not _path_exists(text, doc.parent):
                problem = "no such file"
        else:
            problem = _name_problem(text)
        if problem is not None:
            stale.append(f"{where}:{line}: {text} ({problem})")
    return stale


def test_every_cited_path_and_name_exists() -> None:
    assert len(DOCS) > 5
    stale = [entry for doc in DOCS for entry in stale_citations(doc)]
    assert stale == [], "stale citations in the docs:\n" + "\n".join(stale)


def test_planted_stale_citations_are_each_found(tmp_path: Path) -> None:
    doc = tmp_path / "PLANTED.md"
    doc.write_text(
        "Fine: `server/secagg/rounds.py`, tests/test_layers.py, `protocol.m_step`, `Mechanism`, "
        "`ldpem.common.planning.executor.make_executor`,\n`holder_round`, "
        "`LDPEM_FORECAST_WORKERS`,\n"
        "`docs/results/fig1-{central,local}.csv`, `--mechanism`, `np.clip`, `gmm`.\n"
        "Stale: `cli/cmd_run.py` and `_assemble` and `protocol.hospital_scale`,\n"
        "`ldpem.common.nowhere`, `NoSuchClass`, `LDPEM_NO_SUCH`, `test_nothing.py`,\n"
        "see docs/NOWHERE.md and [this](MISSING.md).\n"
        "```sh\nls cli/cmd_in_a_code_block.py\n```\n",
        encoding="utf-8",
    )
    assert stale_citations(doc) == [
        "PLANTED.md:4: cli/cmd_run.py (no such path)",
        "PLANTED.md:4: _assemble (not a name of ours)",
        "PLANTED.md:4: protocol.hospital_scale (protocol defines no hospital_scale)",
        "PLANTED.md:5: ldpem.common.nowhere (ldpem.common defines no nowhere)",
        "PLANTED.md:5: NoSuchClass (not a name of ours)",
        "PLANTED.md:5: LDPEM_NO_SUCH (no setting or option of that name)",
        "PLANTED.md:5: test_nothing.py (no such file in the repository)",
        "PLANTED.md:6: docs/NOWHERE.md (no such path)",
        "PLANTED.md:6: MISSING.md (no such file)",
    ]
