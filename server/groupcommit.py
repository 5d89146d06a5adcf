"""Group commit, the store's way of making changes durable: changes that arrive together
share one transaction of the Store, so one fsync makes the whole batch durable.

The round state machine (``ldpem.server.machine``) says WHAT a change writes; this module
says HOW it becomes durable: each change runs in its own savepoint (a refused change does
not undo the others), the transaction runs in a worker thread (its commit and fsync do not
stop the event loop), and a change's caller resumes only once the transaction has
committed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

from ldpem.server.store import Store

__all__ = ["GroupCommit"]

T = TypeVar("T")


class GroupCommit(Generic[T]):
    """Changes submitted within ``window`` seconds share one transaction of ``store``, each
    in its own savepoint. The transaction runs in a worker thread; the Store's lock keeps
    other reads out until it has committed. ``on_commit`` is called on the event loop after
    each committed batch with the batch's outcomes (a change's result, or the exception that
    rolled its savepoint back), in submission order. Use from one loop."""

    def __init__(
        self,
        store: Store,
        window: float,
        on_commit: Callable[[list[T | Exception]], None],
    ) -> None:
        self.store = store
        self.window = window
        self.on_commit = on_commit
        self._pending: list[tuple[Callable[[], T], asyncio.Future[T]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def durably(self, apply: Callable[[], T]) -> T:
        """``apply()`` committed to disk, in one transaction with the other changes that
        arrive within ``window`` seconds. Returns (or raises what ``apply`` raised) only
        after that commit; ``apply`` runs in its own savepoint, so a refused change does not
        undo the others. If the commit fails, every change of the batch raises its error."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._pending.append((apply, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        await asyncio.sleep(self.window)
        # Changes that arrive while a batch commits form the next batch.
        while self._pending:
            batch, self._pending = self._pending, []
            await self._commit(batch)

    async def _commit(self, batch: list[tuple[Callable[[], T], asyncio.Future[T]]]) -> None:
        try:
            outcomes = await asyncio.to_thread(self._apply, [apply for apply, _ in batch])
        except Exception as error:  # the commit failed: nothing of the batch is durable
            for _, future in batch:
                if not future.done():
                    future.set_exception(error)
            return
        for (_, future), outcome in zip(batch, outcomes, strict=True):
            if future.done():  # the caller was cancelled (client gone); it is committed
                continue
            if isinstance(outcome, Exception):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)
        self.on_commit(outcomes)

    def _apply(self, batch: list[Callable[[], T]]) -> list[T | Exception]:
        outcomes: list[T | Exception] = []
        with self.store.transaction():
            for apply in batch:
                try:
                    with self.store.savepoint():
                        outcomes.append(apply())
                except Exception as error:
                    outcomes.append(error)
        return outcomes
