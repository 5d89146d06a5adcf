"""The executor: the same results, in the tasks' order, whichever executor runs them."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from ldpem.common.core.errors import UserError
from ldpem.common.planning.executor import (
    DASK_MISSING,
    PoolExecutor,
    SerialExecutor,
    local_workers,
    make_executor,
)
from ldpem.common.planning.prediction import Problem, predict


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
    with pytest.raises(UserError, match="scheduler must be"):
        make_executor("threads")
    with pytest.raises(UserError, match="workers must be >= 1"):
        make_executor(workers=0)


def test_a_scheduler_without_distributed_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed fails
    with pytest.raises(UserError) as raised:
        make_executor("tcp://127.0.0.1:8786")
    assert str(raised.value) == DASK_MISSING
    assert DASK_MISSING == (
        "--scheduler needs the Python package distributed: pip install 'ldpem[dask]'"
    )


def test_workers_end_when_the_process_that_started_them_is_killed(tmp_path: Path) -> None:
    script = tmp_path / "pool.py"
    script.write_text(
        textwrap.dedent(
            """
            import threading, time
            from ldpem.common.planning.executor import PoolExecutor

            def nap(x):
                time.sleep(60)

            def run():
                with PoolExecutor(2) as pool:
                    pool.map(nap, [1, 2])

            if __name__ == "__main__":
                # From a thread, as the coordinator: its workers come from a fork server.
                threading.Thread(target=run, daemon=True).start()
                time.sleep(120)
            """
        )
    )
    parent = subprocess.Popen([sys.executable, str(script)])
    try:
        deadline = time.monotonic() + 60
        workers: list[int] = []
        while len(workers) < 2:  # the fork server's two children
            assert time.monotonic() < deadline, "no workers started"
            time.sleep(0.2)
            workers = [pid for pid in descendants(parent.pid) if pid != parent.pid]
            workers = [pid for pid in workers if parent_of(pid) != parent.pid]
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in workers):
        assert time.monotonic() < deadline, f"workers {workers} outlived their parent"
        time.sleep(0.2)


def parent_of(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return -1
    return int(fields[1])


def descendants(root: int) -> list[int]:
    """Every live process below ``root`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            children.setdefault(parent_of(int(entry.name)), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
