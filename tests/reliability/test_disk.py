"""Disk full or read-only state directory at start-up: one clear line, exit status 2, no
partial state left behind (and an existing state untouched, accepted once writable again).

Real file systems: a 64 KiB tmpfs filled to the last block, and read-only bind mounts, in a
private mount namespace (``unshare -m``; see disk_driver.py). Skipped where mounts are not
permitted.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ldpem.processes import start_coordinator
from ldpem.server.store import Store
from tests.fedkit import process_manager

DRIVER = Path(__file__).with_name("disk_driver.py")


def _can_mount() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=4k tmpfs /mnt"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    return probe.returncode == 0


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if not _can_mount():
        pytest.skip("mount namespaces are not permitted here (unshare -m)")
    base = tmp_path_factory.mktemp("disk")
    done = subprocess.run(
        ["unshare", "-m", sys.executable, str(DRIVER), str(base)],
        capture_output=True,
        timeout=600,
        check=False,
        cwd=Path(__file__).parents[2],
    )
    assert done.returncode == 0, done.stderr.decode()
    result: dict[str, Any] = json.loads(done.stdout)
    result["base"] = str(base)
    return result


def _one_clear_line(outcome: dict[str, Any], *words: str) -> str:
    assert outcome["code"] == 2, outcome
    assert "Traceback" not in outcome["stderr"], outcome["stderr"]
    last: str = outcome["stderr"].strip().splitlines()[-1]
    assert last.startswith("ldpem coordinator: error: "), last
    for word in words:
        assert word in last, last
    return last


def test_disk_full_with_the_admin_token_given(outcomes: dict[str, Any]) -> None:
    outcome = outcomes["full_with_token"]
    _one_clear_line(outcome, "state.sqlite", "disk is full")
    assert outcome["files"] == ["filler"]  # no partial state file


def test_disk_full_when_the_admin_token_must_be_written(outcomes: dict[str, Any]) -> None:
    outcome = outcomes["full_without_token"]
    _one_clear_line(outcome, "admin-token", "No space left on device")
    assert outcome["files"] == ["filler"]  # no empty token file that the next start refuses


def test_read_only_empty_directory(outcomes: dict[str, Any]) -> None:
    outcome = outcomes["readonly_empty"]
    _one_clear_line(outcome, "state.sqlite", "cannot open the coordinator state")
    assert outcome["files"] == []


def test_read_only_existing_state_is_untouched_and_accepted_later(
    outcomes: dict[str, Any], tmp_path: Path
) -> None:
    outcome = outcomes["readonly_existing"]
    _one_clear_line(outcome, "state.sqlite")
    assert outcome["unchanged"] and outcome["files"] == ["state.sqlite"]
    # The same file, writable again (the mount is gone): the next start serves it.
    state = Path(outcomes["base"]) / "ro-existing" / "state.sqlite"
    Store(state).close()
    with process_manager(tmp_path) as procs:
        start_coordinator(procs, state=state, timeout=120)
