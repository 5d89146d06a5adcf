"""The committed locks agree with pyproject.toml and with each other.

``make test`` and ``make demo`` install requirements/test.lock, the Docker image
requirements/runtime.lock (both written by ``make lock``). A dependency added to
pyproject.toml without ``make lock`` would make a fresh machine fail or resolve it freely.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.MULTILINE)


def _name(requirement: str) -> str:
    """The normalised project name of a PEP 508 requirement."""
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement.strip())
    assert match is not None, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def _pins(lock: str) -> dict[str, str]:
    text = (ROOT / "requirements" / lock).read_text()
    return {_name(name): version for name, version in _PIN.findall(text)}


def test_every_pin_has_a_hash() -> None:
    for lock in ("test.lock", "runtime.lock"):
        text = (ROOT / "requirements" / lock).read_text()
        for block in re.split(r"\n(?=[A-Za-z0-9])", text):
            if _PIN.match(block):
                assert "--hash=sha256:" in block, f"{lock}: {block.splitlines()[0]}"


def test_locks_cover_pyproject_and_agree() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    test_pins, runtime_pins = _pins("test.lock"), _pins("runtime.lock")
    runtime = {_name(r) for r in project["dependencies"]}
    assert runtime <= set(runtime_pins), sorted(runtime - set(runtime_pins))
    tested = {_name(r) for r in project["optional-dependencies"]["test"]}
    assert runtime | tested <= set(test_pins), sorted((runtime | tested) - set(test_pins))
    for name, version in runtime_pins.items():
        assert test_pins.get(name) == version, (
            f"{name}: runtime {version}, test {test_pins.get(name)}"
        )


def test_installs_use_the_locks() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "--require-hashes --no-deps -r $(TEST_LOCK)" in makefile
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "COPY requirements/runtime.lock" in dockerfile
    assert "--require-hashes --no-deps --requirement /opt/ldpem-runtime.lock" in dockerfile
