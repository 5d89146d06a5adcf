"""Group commit of secure-aggregation messages (``server/secagg/log.py``): rows appended
together share one commit, a holder is answered only after its row's commit, and every
other write of the rounds stores the pending rows first, in order, so that what a restart
replays is the order in which the aggregator saw the messages."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ldpem.server.secagg.log import MessageLog
from ldpem.server.store import Store


class CountingStore(Store):
    """A Store that counts its committed transactions, and can be made to fail them."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.commits = 0
        self.broken = False

    @contextmanager
    def transaction(self) -> Iterator[None]:
        if self.broken:
            raise sqlite3.OperationalError("database or disk is full")
        with super().transaction():
            yield
        self.commits += 1


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CountingStore]:
    opened = CountingStore(tmp_path / "state.sqlite")
    yield opened
    opened.close()


def stored(store: Store, t: int = 0) -> list[tuple[str, str, str]]:
    return store.secagg_messages("run-1", t)


def test_messages_that_arrive_together_share_one_commit(store: CountingStore) -> None:
    async def scenario() -> None:
        log = MessageLog(store, window=0.05)
        for holder in ("h1", "h2", "h3"):
            log.append("run-1", 0, "advertise", holder, f'{{"holder":"{holder}"}}')
        committed = log.committed()
        # Not durable yet, so not answered yet.
        assert not committed.done() and stored(store) == []
        await asyncio.wait_for(committed, timeout=5)

    asyncio.run(scenario())
    assert store.commits == 1
    assert [holder for _, holder, _ in stored(store)] == ["h1", "h2", "h3"]


def test_a_retry_of_a_pending_message_waits_for_the_same_commit(store: CountingStore) -> None:
    async def scenario() -> None:
        log = MessageLog(store, window=0.05)
        log.append("run-1", 0, "shares", "h1", "{}")
        first, retry = log.committed(), log.committed()
        assert retry is first and not retry.done()
        await asyncio.wait_for(retry, timeout=5)
        # Nothing pending: answered at once.
        assert log.committed().done()

    asyncio.run(scenario())


def test_a_transaction_stores_the_pending_messages_first(store: CountingStore) -> None:
    """A step's close (its own rows) commits the messages that came before it, before its
    rows: the stored order is the order the aggregator saw, and their holders are answered
    by that commit, without waiting for the window."""

    async def scenario() -> None:
        log = MessageLog(store, window=60.0)
        log.append("run-1", 0, "masked", "h1", "{}")
        log.append("run-1", 1, "advertise", "h2", "{}")  # another round, same batch
        log.append("run-1", 0, "masked", "h3", "{}")
        committed = log.committed()
        with log.transaction():
            store.add_secagg("run-1", 0, [("consistency_check", "", "{}")])
        assert committed.done() and committed.exception() is None

    asyncio.run(scenario())
    assert store.commits == 1
    assert [(kind, holder) for kind, holder, _ in stored(store)] == [
        ("masked", "h1"),
        ("masked", "h3"),
        ("consistency_check", ""),
    ]
    assert [holder for _, holder, _ in stored(store, 1)] == ["h2"]


def test_a_failed_transaction_leaves_the_messages_pending(store: CountingStore) -> None:
    async def scenario() -> None:
        log = MessageLog(store, window=0.05)
        log.append("run-1", 0, "masked", "h1", "{}")
        committed = log.committed()
        with pytest.raises(RuntimeError), log.transaction():
            store.add_secagg("run-1", 0, [("consistency_check", "", "{}")])
            raise RuntimeError("the close failed")
        assert stored(store) == [] and not committed.done()
        await asyncio.wait_for(committed, timeout=5)  # the window's flush

    asyncio.run(scenario())
    assert [(kind, holder) for kind, holder, _ in stored(store)] == [("masked", "h1")]


def test_a_failed_commit_fails_the_waiting_requests(store: CountingStore) -> None:
    async def scenario() -> None:
        log = MessageLog(store, window=0.01)
        log.append("run-1", 0, "masked", "h1", "{}")
        committed = log.committed()
        store.broken = True
        with pytest.raises(sqlite3.OperationalError, match="disk is full"):
            await asyncio.wait_for(committed, timeout=5)

    asyncio.run(scenario())
    store.broken = False
    assert stored(store) == []
