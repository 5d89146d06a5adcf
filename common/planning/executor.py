"""Where independent simulations run: one small interface, ``Executor.map(fn, tasks)``.

The predictions of ``ldpem.common.planning.prediction`` (the forecast of ``run create``, ``ldpem
plan`` and what the demo and the status page show) are many independent seeded studies.
Each task carries its own seed, so its result depends on the task alone, never on which
worker ran it or in what order: every executor returns the same list for the same tasks.

- ``SerialExecutor``: in this process, one task after the other (1 worker).
- ``PoolExecutor``: a ``concurrent.futures.ProcessPoolExecutor`` of this machine's cores.

- ``DaskExecutor``: the workers of an existing Dask distributed cluster
  (``tcp://HOST:8786``; the optional extra ``ldpem[dask]``). Its workers must import the
  same ``ldpem`` (install it where they run).

Every worker, local or Dask, first imports the plugin modules (``LDPEM_PLUGINS``,
``ldpem.common.core.plugins``) this process loaded, so a task of a plugin's model or mechanism
finds it registered there too.

``make_executor(scheduler)`` chooses: None for the local pool, ``serial``, or a Dask
scheduler's address.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from multiprocessing.context import BaseContext
from types import TracebackType
from typing import Protocol, TypeVar

from ldpem.common.core.errors import UserError
from ldpem.common.core.plugins import import_plugins, plugin_modules

__all__ = [
    "DASK_MISSING",
    "DaskExecutor",
    "Executor",
    "PoolExecutor",
    "SerialExecutor",
    "local_workers",
    "make_executor",
]

T = TypeVar("T")
R = TypeVar("R")

log = logging.getLogger("ldpem")

#: How often a pool worker checks that the process that started it is still there.
PARENT_CHECK_SECONDS = 0.5
#: Modules the pool's fork server imports once, so that each worker starts with them loaded
#: (a worker that imported numpy and the simulator itself would take a second to start).
_PRELOAD = ["ldpem.common.planning.prediction"]


class Executor(Protocol):
    """Runs ``fn`` on every task and returns the results in the tasks' order.

    ``fn`` must be a module-level function and the tasks picklable (a pool sends both to
    other processes); each task must carry its own seed.
    """

    @property
    def workers(self) -> int:
        """How many tasks may run at once."""
        ...

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> list[R]: ...

    def close(self) -> None: ...

    def __enter__(self) -> Executor: ...

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None: ...


class _Closing:
    """Context-manager methods shared by the executors: ``with`` closes them."""

    def close(self) -> None:
        """Release the workers (nothing to release here)."""

    def __enter__(self) -> Executor:
        return self  # type: ignore[return-value]  # every subclass is an Executor

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


class SerialExecutor(_Closing):
    """Every task in this process, in order."""

    @property
    def workers(self) -> int:
        return 1

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> list[R]:
        return [fn(task) for task in tasks]


class PoolExecutor(_Closing):
    """A pool of ``workers`` processes, started at the first ``map`` and kept until
    ``close`` (a planner maps many batches; starting processes for each would cost more
    than small batches take).

    How the processes start: forked from this process while it runs a single thread (the
    CLI: fast, and nothing to re-import); otherwise (the coordinator calls this from a
    worker thread of its server) from a fork server that imported the simulator once,
    because a fork copies other threads' locks in whatever state they are; spawned where
    neither exists. A fork server or a spawn imports the main script again in each worker:
    a script of yours that calls this from a thread needs ``if __name__ == "__main__":``.
    """

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self._workers = workers
        self._pool: ProcessPoolExecutor | None = None

    @property
    def workers(self) -> int:
        return self._workers

    def _started(self) -> ProcessPoolExecutor:
        if self._pool is None:
            methods = multiprocessing.get_all_start_methods()
            context: BaseContext
            if "fork" in methods and threading.active_count() == 1:
                context = multiprocessing.get_context("fork")
            elif "forkserver" in methods:
                context = multiprocessing.get_context("forkserver")
                # The plugins too, so that each worker starts with them (the initializer
                # imports them again, a no-op then, and reports a failure).
                context.set_forkserver_preload([*_PRELOAD, *plugin_modules()])
            else:
                context = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(
                max_workers=self._workers,
                mp_context=context,
                initializer=_start_worker,
                initargs=(os.getpid(), plugin_modules()),
            )
        return self._pool

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> list[R]:
        if len(tasks) <= 1:
            # Nothing to share out: not worth a process (the result is the same).
            return [fn(task) for task in tasks]
        try:
            pool = self._started()
        except OSError as error:
            # A sandbox without process or semaphore support: the same results, slower.
            log.warning("no process pool (%s): running %d tasks serially", error, len(tasks))
            return [fn(task) for task in tasks]
        return list(pool.map(fn, tasks))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


#: The one line a ``--scheduler`` without the optional extra ends with.
DASK_MISSING = "--scheduler needs the Python package distributed: pip install 'ldpem[dask]'"


class DaskExecutor(_Closing):
    """The workers of the Dask distributed cluster whose scheduler is at ``address``
    (``tcp://HOST:8786``), through a ``distributed.Client`` connected at construction.

    Each task is one Dask task (``pure=False``: never deduplicated), gathered in the
    tasks' order; a task's result depends on the task alone, so it equals the local
    pool's. A worker's error is raised here."""

    def __init__(self, address: str, *, timeout: float = 30.0) -> None:
        try:
            from distributed import Client
        except ImportError:
            raise UserError(DASK_MISSING) from None
        try:
            self._client = Client(  # type: ignore[no-untyped-call]  # distributed is untyped
                address, timeout=timeout, set_as_default=False
            )
        except (OSError, TimeoutError) as error:
            raise UserError(f"scheduler {address}: cannot connect ({error})") from None
        self.address = address

    @property
    def workers(self) -> int:
        threads = self._client.nthreads()  # type: ignore[no-untyped-call]
        return max(1, int(sum(threads.values())))

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> list[R]:
        if not tasks:
            return []
        # A Dask worker's environment is its own: it imports this process's plugins.
        task = partial(_with_plugins, plugin_modules(), fn)
        futures = self._client.map(task, list(tasks), pure=False)
        return list(self._client.gather(futures))  # type: ignore[no-untyped-call]

    def close(self) -> None:
        self._client.close()  # type: ignore[no-untyped-call]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's (the pid was reused)
        return True
    return True


def _with_plugins(plugins: tuple[str, ...], fn: Callable[[T], R], task: T) -> R:
    """``fn(task)`` once the modules ``plugins`` are imported (a Dask task)."""
    import_plugins(plugins)
    return fn(task)


def _start_worker(parent: int, plugins: tuple[str, ...]) -> None:
    """A pool worker's initializer: import the plugins the parent loaded, so that tasks of
    their models and mechanisms find them registered, and follow the parent."""
    import_plugins(plugins)
    _follow_parent(parent)


def _follow_parent(parent: int) -> None:
    """A pool worker's initializer: end the worker once ``parent``, the process that
    started the pool, is gone. A worker whose parent is killed (a coordinator stopped by
    SIGKILL mid-forecast) would otherwise wait for tasks forever."""
    started_under = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(PARENT_CHECK_SECONDS)
            # Reparented (a forked worker) or its parent no longer exists (a worker forked
            # by the fork server, whose parent is that server).
            if os.getppid() != started_under or not _alive(parent):
                os._exit(1)

    threading.Thread(target=watch, name="ldpem-follow-parent", daemon=True).start()


def local_workers() -> int:
    """The cores this process may run on (its CPU affinity where the OS tells it)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def make_executor(scheduler: str | None = None, *, workers: int | None = None) -> Executor:
    """The executor for ``scheduler``.

    Parameters
    ----------
    scheduler : str, optional
        None: a pool of ``workers`` processes on this machine (default:
        ``local_workers()``), serial when that is 1. ``"serial"``: this process only.
        ``tcp://HOST:PORT``: the Dask distributed cluster of that scheduler
        (``DaskExecutor``; UserError ``DASK_MISSING`` without the package).
    workers : int, optional
        Processes of the local pool.

    Returns
    -------
    Executor
        To be closed (``with make_executor() as executor: ...``).
    """
    if workers is not None and workers < 1:
        raise UserError(f"workers must be >= 1, got {workers}")
    if scheduler is None:
        count = workers if workers is not None else local_workers()
        return SerialExecutor() if count == 1 else PoolExecutor(count)
    if scheduler == "serial":
        return SerialExecutor()
    if scheduler.startswith(("tcp://", "tls://")):
        return DaskExecutor(scheduler)
    raise UserError(f"scheduler must be serial or tcp://HOST:PORT, got {scheduler!r}")
