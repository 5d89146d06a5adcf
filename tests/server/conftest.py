from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from ldpem.server.app import create_app
from tests.fedkit import settings
from tests.secaggdriver import InProcessCoordinator


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(settings(tmp_path))) as c:
        yield c


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[InProcessCoordinator]:
    """The coordinator in-process on ``tmp_path``'s state file, restartable
    (tests/secaggdriver.py)."""
    c = InProcessCoordinator(tmp_path)
    try:
        yield c
    finally:
        c.close()
