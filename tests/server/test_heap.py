"""The coordinator process's collector (``ldpem.server.heap``): frozen and spaced out before
``ldpem coordinator`` serves, and left alone in a process that only imports the app."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ldpem.server.heap import FULL_EVERY, THRESHOLDS

#: Runs ``ldpem coordinator`` with uvicorn.run replaced: prints the collector's state at
#: the moment the coordinator would start serving.
_PROBE = """
import gc, json, sys
import uvicorn
def serve(app, **kwargs):
    print(json.dumps({"frozen": gc.get_freeze_count(), "threshold": gc.get_threshold()}))
uvicorn.run = serve
from ldpem.cli import main
raise SystemExit(main(["coordinator", "--state", sys.argv[1], "--public-status"]))
"""


def _collector_when_serving(tmp_path: Path) -> dict[str, object]:
    env = {**os.environ, "LDPEM_ADMIN_TOKEN": "a" * 43}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(tmp_path / "state.sqlite")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    state: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return state


def test_the_coordinator_serves_with_its_startup_heap_frozen(tmp_path: Path) -> None:
    state = _collector_when_serving(tmp_path)
    # The imports alone make well over 10⁴ objects: all of them out of the walks.
    assert isinstance(state["frozen"], int) and state["frozen"] > 10_000
    assert tuple(state["threshold"]) == THRESHOLDS  # type: ignore[arg-type]


def test_the_thresholds_space_full_collections_out() -> None:
    # A full collection walks the whole unfrozen heap: at most one per 10⁶ allocations,
    # where the default (700, 10, 10) allowed one per 7·10⁴.
    assert FULL_EVERY >= 1_000_000
    assert THRESHOLDS[0] >= 10 * 700


def test_importing_the_app_leaves_the_collector_alone() -> None:
    probe = (
        "import gc, json; before = gc.get_threshold(); "
        "import ldpem.server.app, ldpem.server.heap; "
        "print(json.dumps([gc.get_freeze_count(), before, gc.get_threshold()]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    frozen, before, after = json.loads(done.stdout)
    assert frozen == 0 and after == before != list(THRESHOLDS)
