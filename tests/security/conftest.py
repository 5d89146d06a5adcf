from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.procs import Processes


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Processes]:
    processes = Processes(tmp_path)
    try:
        yield processes
    finally:
        processes.stop_all()
