"""The one recipe for a durable SQLite file, shared by the coordinator's store and the
agent's ledger.

The exception to "no I/O in ``common/``" (docs/ARCHITECTURE.md): this module only opens
the file it is given, nothing else in ``common/`` calls it, and it lives here because
``server/`` and ``client/`` may not import each other, and both must make a commit durable
the same way.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["connect_durable", "immediate"]


def connect_durable(path: str | Path) -> sqlite3.Connection:
    """A connection to the SQLite file at ``path`` in WAL mode with ``synchronous=FULL``.

    Parameters
    ----------
    path : str or Path
        The database file; ``":memory:"`` for a database in memory (no WAL there).

    Returns
    -------
    sqlite3.Connection
        In autocommit mode (``isolation_level=None``: the caller writes BEGIN and COMMIT),
        rows as ``sqlite3.Row``, usable from another thread than the one that opened it
        (``check_same_thread=False``: the caller serializes its use).
    """
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.row_factory = sqlite3.Row
    if str(path) != ":memory:":
        db.execute("PRAGMA journal_mode=WAL")
    # FULL: a commit is on disk (WAL fsynced) before COMMIT returns, so what was
    # acknowledged or sent survives a power loss, not only a process kill.
    db.execute("PRAGMA synchronous=FULL")
    return db


@contextmanager
def immediate(db: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE … COMMIT on ``db``, or ROLLBACK if the block raises: the write lock
    is taken at BEGIN, so a check and the write that depends on it see the same state."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
