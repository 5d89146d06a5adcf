"""``make test`` outside CI starts no apt, docker, browser or database command.

The tests that would (markers in tests/conftest.py) are run in a child pytest with every
such program on PATH replaced by a stub that records its call; without ``CI`` and the
``LDPEM_TEST_*`` variables they must be skipped, with their reason, and call nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import SYSTEM_MARKERS

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = (
    "apt",
    "apt-get",
    "dpkg",
    "docker",
    "dockerd",
    "docker-compose",
    "debootstrap",
    "chromium",
    "chromedriver",
    "initdb",
    "pg_ctl",
    "postgres",
)


def test_system_tests_are_skipped_and_call_nothing_outside_ci(tmp_path: Path) -> None:
    stubs = tmp_path / "bin"
    stubs.mkdir()
    calls = tmp_path / "calls.log"
    for program in PROGRAMS:
        stub = stubs / program
        stub.write_text(f'#!/bin/sh\necho "{program} $*" >> "{calls}"\nexit 1\n')
        stub.chmod(0o755)
    env = {
        key: value
        for key, value in os.environ.items()
        if key != "CI" and key not in SYSTEM_MARKERS.values()
    }
    env["PATH"] = f"{stubs}{os.pathsep}{env.get('PATH', '')}"
    selection = " or ".join(SYSTEM_MARKERS)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            selection,
            "-rs",
            "tests",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert not calls.exists(), calls.read_text()
    # Every selected test was skipped with its reason shown, none ran.
    assert " passed" not in output and " failed" not in output, output
    assert "compose tests install system software: run with CI=true or LDPEM_TEST_COMPOSE=1" in (
        output
    )
