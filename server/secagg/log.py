"""Group commit of secure-aggregation messages: the rows that holders' messages add within a
short window share one transaction of the Store, so one fsync makes them all durable.

A holder's message is handed to the round's aggregator as it arrives (``SecAggRounds.
receive``), and its row is appended here; the holder is answered only once that row is
committed (``committed``). Every other write of the secure-aggregation rounds (a step's
outputs, a round's sum, a failure) goes through ``transaction``, which first writes the
pending rows, in the order they were appended, so that the stored order is always the
order in which the aggregator saw the messages: what a restarted coordinator replays
(``server/secagg/replay.py``). All of it runs on the event loop's thread, one call at a
time, which is what keeps that order.

At K = 1000 a round stores about 5000 messages; one commit each cost about 80 µs of CPU
(mostly the kernel's, for the fsync) and held the event loop for about 150 µs, against
about 15 µs and 25 µs per message when ten share a commit (docs/PERFORMANCE.md, "The
coordinator's CPU at K = 1000, third pass").
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from contextlib import contextmanager

from ldpem.server.store import Store

__all__ = ["MessageLog"]

#: (run id, round, kind, holder, JSON text): one stored message.
Row = tuple[str, int, str, str, str]


class MessageLog:
    """Rows appended within ``window`` seconds share one commit of ``store``."""

    def __init__(self, store: Store, window: float) -> None:
        self.store = store
        self.window = window
        self._rows: list[Row] = []
        #: Resolved when the pending rows are committed; None while none are pending.
        self._committed: asyncio.Future[None] | None = None
        self._flusher: asyncio.TimerHandle | None = None

    def append(self, run_id: str, t: int, kind: str, holder: str, text: str) -> None:
        """Add a row, committed with the others within ``window`` seconds (or sooner, by
        the next ``transaction``). Call from the event loop."""
        self._rows.append((run_id, t, kind, holder, text))
        if self._committed is None:
            loop = asyncio.get_running_loop()
            self._committed = loop.create_future()
            self._flusher = loop.call_later(self.window, self.flush)

    def committed(self) -> asyncio.Future[None]:
        """Resolved once every row appended so far is committed (at once if none is
        pending); it raises the commit's error if that commit failed."""
        if self._committed is not None:
            return self._committed
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """A transaction of the store that first writes every pending row. If the block
        raises, nothing is committed and the rows stay pending (committed by the next
        flush); otherwise their requests are answered once it has committed."""
        rows, committed, flusher = self._rows, self._committed, self._flusher
        self._rows, self._committed, self._flusher = [], None, None
        try:
            with self.store.transaction():
                _write(self.store, rows)
                yield
        except BaseException:
            # Nothing can have been appended meanwhile: this all runs on one thread.
            self._rows, self._committed, self._flusher = rows, committed, flusher
            raise
        if flusher is not None:
            flusher.cancel()
        if committed is not None and not committed.done():
            committed.set_result(None)

    def flush(self) -> None:
        """Commit the pending rows now. A failed commit (a full disk) fails the requests
        waiting for them, which the holders retry; it is not raised here."""
        rows, committed = self._rows, self._committed
        self._rows, self._committed, self._flusher = [], None, None
        try:
            with self.store.transaction():
                _write(self.store, rows)
        except Exception as error:
            if committed is not None and not committed.done():
                committed.set_exception(error)
            return
        if committed is not None and not committed.done():
            committed.set_result(None)


def _write(store: Store, rows: list[Row]) -> None:
    """``rows`` inside the caller's transaction, each round's in the order given."""
    for (run_id, t), group in itertools.groupby(rows, key=lambda row: (row[0], row[1])):
        store.add_secagg(run_id, t, [(kind, holder, text) for _, _, kind, holder, text in group])
