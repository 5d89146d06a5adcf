"""Run inside a private mount namespace (``unshare -m``) by test_disk.py: starts the
coordinator on a full tmpfs and on read-only directories, prints the outcomes as JSON.

Not a test module (no ``test_`` prefix): it mounts file systems, so only test_disk.py runs
it, in its own namespace, where the mounts vanish with the process.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ADMIN = "admin-token-for-tests-0123456789"
READ = "read-token-for-tests-0123456789abcdef"


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True)


def start(state: Path, *, token: bool) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDPEM_")}
    if token:  # both tokens given: nothing to write but the state
        env["LDPEM_ADMIN_TOKEN"] = ADMIN
        env["LDPEM_READ_TOKEN"] = READ
    try:
        done = subprocess.run(
            [sys.executable, "-m", "ldpem", "coordinator", "--port", "0", "--state", str(state)],
            capture_output=True,
            env=env,
            timeout=120,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"code": None, "stderr": "still running after 120 s", "files": []}
    return {
        "code": done.returncode,
        "stderr": done.stderr.decode(errors="replace"),
        "files": sorted(p.name for p in state.parent.iterdir()),
    }


def digest(directory: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(directory.iterdir()):
        h.update(path.name.encode() + path.read_bytes())
    return h.hexdigest()


def main(base: Path) -> None:
    out: dict[str, Any] = {}
    full = base / "full"
    full.mkdir()
    sh("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full))
    try:  # fill it: the next block written fails
        with (full / "filler").open("wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
    except OSError:
        pass
    out["full_with_token"] = start(full / "state.sqlite", token=True)
    out["full_without_token"] = start(full / "state.sqlite", token=False)

    empty = base / "ro-empty"
    empty.mkdir()
    sh("mount", "--bind", str(empty), str(empty))
    sh("mount", "-o", "remount,bind,ro", str(empty))
    out["readonly_empty"] = start(empty / "state.sqlite", token=True)

    # An existing state in a directory that became read-only: refused (or served), never
    # changed; writable again, the next start accepts it.
    existing = base / "ro-existing"
    existing.mkdir()
    from ldpem.server.store import Store

    Store(existing / "state.sqlite").close()
    before = digest(existing)
    sh("mount", "--bind", str(existing), str(existing))
    sh("mount", "-o", "remount,bind,ro", str(existing))
    out["readonly_existing"] = start(existing / "state.sqlite", token=True)
    out["readonly_existing"]["unchanged"] = digest(existing) == before
    sh("umount", str(existing))
    print(json.dumps(out))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
