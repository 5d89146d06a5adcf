"""The one durable SQLite recipe of the store and the ledger (common/infra/sqlite.py)."""

from __future__ import annotations

from pathlib import Path

from ldpem.common.infra.sqlite import connect_durable

#: PRAGMA synchronous values: 2 is FULL (the WAL is fsynced before COMMIT returns).
FULL = 2


def test_a_file_is_opened_in_wal_mode_with_full_sync(tmp_path: Path) -> None:
    db = connect_durable(tmp_path / "state.sqlite")
    try:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("PRAGMA synchronous").fetchone()[0] == FULL
        assert db.isolation_level is None  # the caller writes BEGIN and COMMIT
        db.execute("CREATE TABLE t (a INTEGER)")
        db.execute("INSERT INTO t VALUES (7)")
        assert db.execute("SELECT a FROM t").fetchone()["a"] == 7  # rows by name
    finally:
        db.close()


def test_memory_databases_keep_full_sync_without_wal() -> None:
    db = connect_durable(":memory:")
    try:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "memory"
        assert db.execute("PRAGMA synchronous").fetchone()[0] == FULL
    finally:
        db.close()


def test_the_store_and_the_ledger_use_it(tmp_path: Path) -> None:
    from ldpem.client.ledger import Ledger
    from ldpem.server.store import Store

    store = Store(tmp_path / "state.sqlite")
    ledger = Ledger(tmp_path / "agent")
    try:
        for db in (store._db, ledger._db):
            assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert db.execute("PRAGMA synchronous").fetchone()[0] == FULL
    finally:
        store.close()
        ledger.close()
