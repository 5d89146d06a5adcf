"""Suite-wide rules.

Tests that install or start system software on the machine (apt-get, a Docker engine, a
browser, a database server) run only where that is wanted: in CI (``CI=true``, as
``.ci/run`` is run) or when asked for by name (``LDPEM_TEST_COMPOSE=1``,
``LDPEM_TEST_BROWSER=1``, ``LDPEM_TEST_POSTGRES=1``). Elsewhere ``make test`` skips them,
with the reason in pytest's summary, and changes nothing on the user's machine
(tests/test_system_software.py checks this).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from ldpem.processes import Processes

#: Marker → the variable that asks for those tests outside CI.
SYSTEM_MARKERS = {
    "compose": "LDPEM_TEST_COMPOSE",
    "browser": "LDPEM_TEST_BROWSER",
    "postgres": "LDPEM_TEST_POSTGRES",
}


def system_tests_allowed(marker: str) -> bool:
    """Whether tests marked ``marker`` may install and start system software here."""
    return os.environ.get("CI") == "true" or os.environ.get(SYSTEM_MARKERS[marker]) == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for marker, variable in SYSTEM_MARKERS.items():
        if system_tests_allowed(marker):
            continue
        skip = pytest.mark.skip(
            reason=f"{marker} tests install system software: run with CI=true or {variable}=1"
        )
        for item in items:
            if item.get_closest_marker(marker) is not None:
                item.add_marker(skip)


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Processes]:
    """Coordinator and agent processes of one test, all stopped when it ends."""
    # Imported here: the suite-wide rules above must not cost the server's imports.
    from tests.fedkit import process_manager

    with process_manager(tmp_path) as processes:
        yield processes
