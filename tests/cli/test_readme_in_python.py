"""The README's Python examples ("Using the library") run as written, in a fresh
interpreter, and ``import ldpem`` stays cheap (the library is imported on first use)."""

from __future__ import annotations

import math
import re

import pytest

from tests.dockit import ROOT, python_blocks, run_python, section, subsections

README = ROOT / "README.md"


def library_examples() -> dict[str, str]:
    """Heading → the first Python block under it, in the README's "Using the library"."""
    examples = subsections(section(README.read_text(), "Using the library"))
    found = {heading: python_blocks(body, "README.md") for heading, body in examples.items()}
    return {heading: code[0] for heading, code in found.items() if code}


def test_the_readme_shows_a_study_in_python() -> None:
    examples = library_examples()
    assert "In Python" in examples
    snippet = examples["In Python"]
    assert "from ldpem import" in snippet and len(snippet.strip().splitlines()) <= 5


#: The example that prints an estimate with its confidence region, not one error.
REGION = "An estimate with its confidence region"


@pytest.mark.parametrize("heading", sorted(set(library_examples()) - {REGION}))
def test_each_example_runs_and_prints_a_finite_error(heading: str) -> None:
    printed = run_python(library_examples()[heading]).split()
    assert len(printed) == 1
    error = float(printed[0])
    # ‖β*‖ = snr·σ = 3 in both: an estimate, not a start.
    assert math.isfinite(error) and error < 1.5


def test_the_readme_shows_an_estimate_with_its_confidence_region() -> None:
    lines = run_python(library_examples()[REGION]).strip().splitlines()
    pattern = r"beta\[(\d)\] = (\S+)  90% interval \[(\S+), (\S+)\]"
    rows = [re.fullmatch(pattern, line) for line in lines[:-1]]
    assert len(rows) == 3 and all(rows), lines
    for j, row in enumerate(rows):
        assert row is not None and int(row.group(1)) == j
        estimate, low, high = (float(row.group(k)) for k in (2, 3, 4))
        # ‖β*‖ = 3 over d = 3: coordinates of size √3, the estimate well inside ±3.
        assert low < high and abs(estimate) < 3 and high - low < 3
    last = re.fullmatch(r"radius (\S+) \(99 draws\), error (\S+)", lines[-1])
    assert last is not None, lines[-1]
    assert 0 < float(last.group(1)) < 3 and math.isfinite(float(last.group(2)))


def test_import_ldpem_loads_no_numpy_and_the_surface_on_first_use() -> None:
    code = (
        "import sys, ldpem\n"
        "assert 'numpy' not in sys.modules, 'import ldpem loaded numpy'\n"
        "from ldpem import Study, run_study, make_plan\n"
        "from ldpem.common.planning.study import run_study as real\n"
        "assert run_study is real and 'numpy' in sys.modules\n"
        "assert {'Study', 'run_study'} <= set(dir(ldpem))\n"
        "try:\n"
        "    ldpem.no_such_name\n"
        "except AttributeError as error:\n"
        "    print(error)\n"
    )
    assert run_python(code).strip() == "module 'ldpem' has no attribute 'no_such_name'"
