"""docs/EXTENDING.md, "A run parameter": adding a field to the run description
(``common/protocol/run_fields.py``) is enough for a study, a prediction's problem and a
command's option of the field's name to have it. The guide's first step is applied to the
real declaration, whose modules are then loaded afresh in place of the installed ones."""

from __future__ import annotations

import argparse
import re
import sys
import types
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from ldpem.options import from_options

ROOT = Path(__file__).resolve().parent.parent
GUIDE = (ROOT / "docs" / "EXTENDING.md").read_text()
SECTION = GUIDE.split("## A run parameter", 1)[1]
DECLARATION = "ldpem.common.protocol.run_fields"
#: The modules that take the declaration, from the lowest: each loaded afresh, in order.
CONSUMERS = {
    "ldpem.common.planning.study": ROOT / "common" / "planning" / "study.py",
    "ldpem.common.planning.problem": ROOT / "common" / "planning" / "problem.py",
}


def guide_step_one() -> tuple[str, str]:
    """The guide's first diff: the line it follows, and the line it adds (without the
    diff's one-character prefixes)."""
    diff = re.search(r"```diff\n(.*?)```", SECTION, flags=re.DOTALL)
    assert diff is not None
    context, added = diff.group(1).splitlines()
    assert context.startswith(" ") and added.startswith("+")
    return context[1:], added[1:]


def load(name: str, source: str, path: Path) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    exec(compile(source, str(path), "exec"), module.__dict__)
    return module


@pytest.fixture
def extended(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """The declaration with the guide's field, and the study and problem built on it."""
    context, added = guide_step_one()
    path = ROOT / "common" / "protocol" / "run_fields.py"
    source = path.read_text()
    assert source.count(context + "\n") == 1
    source = source.replace(context + "\n", f"{context}\n{added}\n")
    for name in (DECLARATION, *CONSUMERS):
        monkeypatch.delitem(sys.modules, name, raising=False)
    modules = {DECLARATION: load(DECLARATION, source, path)}
    for name, file in CONSUMERS.items():
        modules[name] = load(name, file.read_text(), file)
    yield modules
    for name in (DECLARATION, *CONSUMERS):
        sys.modules.pop(name, None)


def test_the_guide_adds_one_field(extended: dict[str, Any]) -> None:
    declared = [f.name for f in fields(extended[DECLARATION].RunFields)]
    assert declared[-1] == "eta_decay"
    assert extended[DECLARATION].RUN_DEFAULTS.eta_decay == 0.0


def test_the_study_and_the_problem_gain_it_with_its_default(extended: dict[str, Any]) -> None:
    study = extended["ldpem.common.planning.study"].Study
    problem = extended["ldpem.common.planning.problem"].Problem
    assert study().eta_decay == 0.0
    assert study(eta_decay=0.1).eta_decay == 0.1
    planned = problem(model="gmm", d=3, sizes=(100,), eta_decay=0.2)
    assert planned.eta_decay == 0.2
    assert planned.study("local", seed=1).eta_decay == 0.2
    assert "('eta_decay', 0.2)" in planned.seed_key


def test_an_option_of_its_name_reaches_the_study(extended: dict[str, Any]) -> None:
    study = extended["ldpem.common.planning.study"].Study
    parser = argparse.ArgumentParser()
    parser.add_argument("--eta-decay", type=float, default=0.0)
    parser.add_argument("--epsilon", type=float, default=1.0)
    args = parser.parse_args(["--eta-decay", "0.3", "--epsilon", "2"])
    built = from_options(study, args)
    assert (built.eta_decay, built.epsilon) == (0.3, 2.0)


def test_the_real_declaration_has_no_such_field() -> None:
    from ldpem.common.protocol.run_fields import RunFields

    assert "eta_decay" not in {f.name for f in fields(RunFields)}
