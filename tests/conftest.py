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

import pytest

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
