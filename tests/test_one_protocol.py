"""One place per idea, and the registries decide (docs/ARCHITECTURE.md, docs/EXTENDING.md).

The code of the installed package (cli/, common/, server/, client/) is read with ``ast``:

* only the protocol (``common/protocol/``) builds mechanisms, takes the M-step and derives
  the study defaults: a second copy of any of these ideas — the way the simulator once
  disagreed with the coordinator — fails here, naming the file and line;
* outside the registries no file compares a model's or a mechanism's name with a string
  literal (``params.mechanism == "hospital"``): it asks the registered class instead, so a
  model or mechanism added in one file takes every path.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ldpem.common.mechanisms import mechanism_names
from ldpem.common.models import model_names

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("cli", "common", "server", "client")
PROTOCOL = "common/protocol/construction.py"
#: The protocol package: the study defaults and the M-step live beside the construction.
PROTOCOL_PACKAGE = "common/protocol/"
#: Where names may be written as literals: each class's own module declares its name.
REGISTRIES = ("common/models/", "common/mechanisms/")
#: The names compared: every registered model and mechanism.
NAMES = frozenset(model_names()) | frozenset(mechanism_names())

#: The mechanism classes: built only by the protocol (their own module defines them).
CONSTRUCTORS = frozenset(
    {
        "LocalTruncation",
        "HospitalTruncation",
        "CentralTruncation",
        "LocalClipped",
        "CentralClipped",
        "NoPrivacy",
    }
)
#: Calibration steps that make a mechanism or a study default from a budget; called only by
#: the protocol (and inside the modules that define them).
CALIBRATION = {
    "noise_std_for": {PROTOCOL, "common/core/accounting.py"},
    "public_scale": {PROTOCOL, "common/protocol/public.py"},
    "local_scale": {PROTOCOL, "common/core/calibration.py"},
    "central_scale": {PROTOCOL, "common/core/calibration.py"},
    "truncation_sensitivity": {
        PROTOCOL,
        "common/core/calibration.py",
        "common/mechanisms/local.py",
    },
    "default_tau": {"common/protocol/defaults.py"},
}
#: Where a mechanism class may be named outside isinstance checks and annotations.
CLASS_HOMES = {PROTOCOL, "common/__init__.py"}


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_minus_1_1(node: ast.expr) -> bool:
    """The δ = n^-1.1 default: an exponent −1.1, written either way."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
        return isinstance(node, ast.Constant) and node.value == 1.1
    return isinstance(node, ast.Constant) and node.value == -1.1


def violations(source: str, path: str) -> list[str]:
    """Every place in ``source`` (the file ``path``, relative to the repository) that holds
    its own copy of a protocol idea."""
    tree = ast.parse(source)
    allowed: set[int] = set()  # ids of Name nodes in isinstance checks and annotations
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _name(node.func) in ("isinstance", "issubclass"):
            for argument in node.args[1:]:
                allowed.update(id(n) for n in ast.walk(argument))
        annotations: list[ast.expr | None] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            annotations.append(node.returns)
        if isinstance(node, ast.arg):
            annotations.append(node.annotation)
        if isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
        for annotation in annotations:
            if annotation is not None:
                allowed.update(id(n) for n in ast.walk(annotation))
    found = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        where = f"{path}:{line}"
        if not path.startswith(REGISTRIES):
            named = _looked_up_name(node)
            if named is not None:
                found.append(f"{where}: {named}")
        if (
            isinstance(node, (ast.Name, ast.Attribute))
            and _name(node) in CONSTRUCTORS
            and path not in CLASS_HOMES
            and not path.startswith("common/mechanisms/")
            and id(node) not in allowed
        ):
            found.append(f"{where}: builds or passes mechanism class {_name(node)}")
        if isinstance(node, ast.Call):
            called = _name(node.func)
            if called in CALIBRATION and path not in CALIBRATION[called]:
                found.append(f"{where}: calls {called} (a mechanism or default of its own)")
        if path.startswith(PROTOCOL_PACKAGE) or not isinstance(node, ast.BinOp):
            continue
        if isinstance(node.op, ast.Pow) and _is_minus_1_1(node.right):
            found.append(f"{where}: a δ = n^-1.1 default of its own")
        if isinstance(node.op, ast.Mult) and "eta" in (_name(node.left), _name(node.right)):
            found.append(f"{where}: an M-step (η · gradient) of its own")
        if (
            isinstance(node.op, ast.FloorDiv)
            and _name(node.right) == "rounds"
            and path != "common/wire/__init__.py"  # the partition's round sizes
        ):
            found.append(f"{where}: records per round (… // rounds) of its own")
    return found


def _named(node: ast.expr | None) -> str | None:
    """The registered name ``node`` is a string literal of, if it is one."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in NAMES:
        return node.value
    return None


def _compared_names(node: ast.Compare) -> set[str]:
    """Registered names among the string constants a comparison holds, alone or in a tuple,
    list, set or a dict's keys (``x == "local"``, ``x in ("gmm", "mrm")``, ``"local" in
    names``)."""
    found: set[str] = set()
    for operand in [node.left, *node.comparators]:
        items: list[ast.expr | None] = [operand]
        if isinstance(operand, (ast.Tuple, ast.List, ast.Set)):
            items = list(operand.elts)
        elif isinstance(operand, ast.Dict):
            items = list(operand.keys)
        found.update(name for item in items if (name := _named(item)) is not None)
    return found


def _looked_up_name(node: ast.AST) -> str | None:
    """What ``node`` does with a registered name written as a literal: compares with it
    (``==``, ``in``), looks it up (``by_name.get("local")``, ``by_name["local"]``) or
    matches it (``case "local":``); None when it does none of these."""
    if isinstance(node, ast.Compare):
        named = _compared_names(node)
        return f"compares with the name {sorted(named)[0]!r}" if named else None
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and node.args
        and (name := _named(node.args[0])) is not None
    ):
        return f"looks up the name {name!r} (.get)"
    if isinstance(node, ast.Subscript) and (name := _named(node.slice)) is not None:
        return f"looks up the name {name!r} ([...])"
    if isinstance(node, ast.MatchValue) and (name := _named(node.value)) is not None:
        return f"matches the name {name!r} (case)"
    return None


def _sources() -> list[tuple[str, str]]:
    files = sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))
    return [(p.read_text(encoding="utf-8"), p.relative_to(ROOT).as_posix()) for p in files]


def test_only_the_protocol_builds_mechanisms_steps_and_defaults() -> None:
    sources = _sources()
    assert any(path == PROTOCOL for _, path in sources)
    found = [v for source, path in sources for v in violations(source, path)]
    assert found == [], "\n".join(found)


@pytest.mark.parametrize(
    ("planted", "message"),
    [
        ("m = LocalTruncation(scale=1.0, smoothing=1.0, noise_std=0.0)", "mechanism class"),
        ("kind = HospitalTruncation if a else b", "mechanism class"),
        ("m = mechanisms.NoPrivacy()", "mechanism class"),
        ("s = noise_std_for(epsilon=1, delta=1e-6, sensitivity=2)", "calls noise_std_for"),
        ("tau = get_model('gmm').default_tau(beta_bound=3, sigma=1, d=2)", "default_tau"),
        ("if params.mechanism == 'hospital': pass", "compares with the name 'hospital'"),
        ("local = name in ('local', 'local-clip')", "compares with the name 'local'"),
        ("if config.model != 'rmc': pass", "compares with the name 'rmc'"),
        ("found = 'hospital' in by_name", "compares with the name 'hospital'"),
        ("ok = name in {'secagg': 1}", "compares with the name 'secagg'"),
        ("local = by_name.get('local')", "looks up the name 'local' (.get)"),
        ("kind = params.get('mrm', None)", "looks up the name 'mrm' (.get)"),
        ("local = by_name['local']", "looks up the name 'local' ([...])"),
        ("match name:\n    case 'hospital': pass", "matches the name 'hospital' (case)"),
        ("match name:\n    case 'gmm' | 'x': pass", "matches the name 'gmm' (case)"),
        ("delta = float(n) ** -1.1", "δ = n^-1.1"),
        ("delta = n**(-1.1)", "δ = n^-1.1"),
        ("beta = beta + params.eta * gradient", "M-step"),
        ("beta += gradient * eta", "M-step"),
        ("m = max(1, total // request.rounds)", "records per round"),
    ],
)
def test_a_planted_copy_is_found(planted: str, message: str) -> None:
    found = violations(planted + "\n", "server/planted.py")
    assert len(found) == 1 and message in found[0], found
    assert found[0].startswith(f"server/planted.py:{planted.count(chr(10)) + 1}: ")


def test_isinstance_checks_and_annotations_are_not_copies() -> None:
    source = (
        "def f(m: LocalTruncation) -> NoPrivacy:\n"
        "    x: CentralClipped\n"
        "    return isinstance(m, (LocalTruncation, LocalClipped))\n"
    )
    assert violations(source, "cli/fine.py") == []
