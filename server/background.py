"""Derived results of a run, computed off the event loop and stored when ready.

A derived result is something the coordinator computes from a run's public values and
stored state, that takes seconds of simulation, and that nothing else waits for: the
accuracy forecast of a new run (``ldpem.server.forecast``), the confidence region of a
finished run's estimate. ``Background.submit`` starts one:

1. ``compute()`` runs in a worker thread of this object's own thread pool (it may itself
   map simulations on a process pool or a Dask cluster); the event loop goes on serving
   reports, status and ``run create``, which therefore returns at once.
2. ``save(value)`` then runs in a worker thread too: it stores the value (a store
   transaction), so it survives a restart and every reader (``run status``,
   ``result.json``, the status page) shows it from then on.
3. While 1–2 run, ``pending(run_id)`` names the result: a reader shows "<kind> pending"
   instead of nothing. When they end (stored or failed), ``on_change`` is called on the
   event loop (the coordinator wakes its long-poll waiters).

A ``compute`` or ``save`` that raises is logged and handed to ``failed(error)`` (in a
worker thread: e.g. store a warning), so a failure is visible, never a pending forever.
A submission for a (run, kind) already pending is ignored. ``close`` (at shutdown)
cancels what is pending: a computation cut short is not stored, and a coordinator that
starts again submits it anew (``Coordinator.resume_derived``). Results that have no
column of their own are stored with ``Store.put_derived`` and read with
``Store.derived``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["Background"]

log = logging.getLogger("ldpem.server")

T = TypeVar("T")

#: Derived results computed at once; more wait for a free thread (each may use a pool).
DEFAULT_THREADS = 2


class Background:
    """The derived results being computed (module docstring). Use from one event loop."""

    def __init__(
        self, *, threads: int = DEFAULT_THREADS, on_change: Callable[[], None] | None = None
    ) -> None:
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="ldpem-derived")
        self._tasks: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._on_change = on_change

    def submit(
        self,
        run_id: str,
        kind: str,
        compute: Callable[[], T],
        save: Callable[[T], None],
        *,
        failed: Callable[[Exception], None] | None = None,
    ) -> bool:
        """Start computing ``kind`` of run ``run_id`` (module docstring); False when it is
        pending already. Call from the event loop."""
        key = (run_id, kind)
        if key in self._tasks:
            return False
        loop = asyncio.get_running_loop()

        async def work() -> None:
            try:
                value = await loop.run_in_executor(self._pool, compute)
                await asyncio.to_thread(save, value)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # shown, not lost: the failure is stored if it can be
                log.exception("%s of run %s failed", kind, run_id, extra={"run": run_id})
                if failed is not None:
                    try:
                        await asyncio.to_thread(failed, error)
                    except Exception:
                        log.exception("storing the failure of %s of run %s failed", kind, run_id)
            finally:
                self._tasks.pop(key, None)
                if self._on_change is not None:
                    self._on_change()

        self._tasks[key] = loop.create_task(work(), name=f"{kind} of run {run_id}")
        return True

    def pending(self, run_id: str) -> list[str]:
        """The kinds of derived result of ``run_id`` being computed, sorted."""
        return sorted(kind for run, kind in self._tasks if run == run_id)

    async def wait(self, run_id: str | None = None) -> None:
        """Until every pending result (of ``run_id``, or of every run) is stored or failed."""
        while True:
            tasks = [t for (run, _), t in self._tasks.items() if run_id in (None, run)]
            if not tasks:
                return
            await asyncio.gather(*tasks, return_exceptions=True)

    async def close(self) -> None:
        """Cancel what is pending (not stored) and release the threads without waiting for
        a computation that is running (its result is dropped)."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._pool.shutdown(wait=False, cancel_futures=True)
