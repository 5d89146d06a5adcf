"""The executor: the same results, in the tasks' order, whichever executor runs them."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from ldpem.common.errors import UserError
from ldpem.common.executor import PoolExecutor, SerialExecutor, local_workers, make_executor
from ldpem.common.prediction import Problem, predict


def seeded_draw(seed: int) -> float:
    """A task seeded by its own seed (module level: a pool pickles it by name)."""
    return float(np.random.default_rng(seed).standard_normal())


def test_pool_and_serial_give_the_same_list_in_order() -> None:
    tasks = list(range(12))
    with PoolExecutor(2) as pool:
        pooled = pool.map(seeded_draw, tasks)
        # The pool stays up between maps (the planner maps many batches).
        again = pool.map(seeded_draw, tasks[::-1])
    assert pooled == SerialExecutor().map(seeded_draw, tasks)
    assert again == pooled[::-1]


def test_a_pool_started_from_a_thread_gives_the_same_prediction() -> None:
    # The coordinator predicts from a worker thread: its pool comes from a fork server.
    problem = Problem(model="gmm", d=2, sizes=(600, 400), rounds=4)
    found: list[tuple[float, ...]] = []

    def run() -> None:
        with PoolExecutor(2) as pool:
            found.append(predict(problem, "local", seeds=4, executor=pool).errors)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert found == [predict(problem, "local", seeds=4, executor=SerialExecutor()).errors]


def test_make_executor_chooses_by_scheduler_and_workers() -> None:
    assert isinstance(make_executor(workers=1), SerialExecutor)
    assert isinstance(make_executor("serial"), SerialExecutor)
    with make_executor(workers=2) as pool:
        assert isinstance(pool, PoolExecutor) and pool.workers == 2
    assert make_executor().workers == local_workers()
    with pytest.raises(UserError, match="Dask clusters are not supported yet"):
        make_executor("tcp://127.0.0.1:8786")
    with pytest.raises(UserError, match="scheduler must be"):
        make_executor("threads")
    with pytest.raises(UserError, match="workers must be >= 1"):
        make_executor(workers=0)
