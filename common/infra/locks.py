"""One process per durable state: an exclusive ``flock`` on a lock file beside it, with the
holder's pid (and what else identifies it, a coordinator's port) written inside.

Shared by the agent (its state directory's ``agent.lock``, client/ledger.py) and the
coordinator (``<state>.lock`` beside its SQLite file, ``ldpem coordinator``): both must
refuse a second process on their state the same way, before they read or write any of it,
and ``server/`` and ``client/`` may not import each other. Like ``sqlite.py`` this module
only opens the file it is given.

The lock is the kernel's (``flock``), not the file's existence: a holder killed with
SIGKILL leaves the file behind but not the lock, so the next start takes it at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

__all__ = ["LockHeld", "hold_lock", "read_holder"]


class LockHeld(Exception):
    """Another process holds the lock; ``holder`` is what it wrote in the lock file (its
    ``pid`` and any other fields), empty when it wrote nothing readable yet."""

    def __init__(self, path: Path, holder: dict[str, str]) -> None:
        super().__init__(f"{path}: held by {holder or 'another process'}")
        self.path = path
        self.holder = holder


def read_holder(text: str) -> dict[str, str]:
    """The fields ``key=value`` of a lock file's content; an agent lock of an older version
    holds its bare pid, read as ``pid``."""
    text = text.strip()
    if text.isdigit():
        return {"pid": text}
    fields = (part.partition("=") for part in text.split())
    return {key: value for key, sep, value in fields if sep and key and value}


def hold_lock(path: Path, **holder: str) -> int:
    """An open descriptor of ``path`` (created mode 600) holding an exclusive ``flock``, with
    ``pid=<this process> key=value …`` of ``holder`` written in it. Closing the descriptor
    (or the process ending) releases the lock. ``LockHeld`` when another process holds it."""
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        text = os.pread(descriptor, 256, 0).decode("ascii", "replace")
        os.close(descriptor)
        raise LockHeld(path, read_holder(text)) from None
    fields = {"pid": str(os.getpid()), **holder}
    try:
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, " ".join(f"{k}={v}" for k, v in fields.items()).encode("ascii"), 0)
    except OSError:
        # A full disk: the lock holds without its note (a second process is refused all
        # the same, without the pid); the state's own open then says what is wrong.
        with contextlib.suppress(OSError):
            os.ftruncate(descriptor, 0)
    return descriptor
