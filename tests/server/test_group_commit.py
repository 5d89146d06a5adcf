"""Group commit: reports arriving together share one durable transaction, each in its own
savepoint, and every report is acknowledged only once that transaction has committed."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ldpem.common.wire import ReportAck, ReportIn, RunCreate, expected_round_count
from ldpem.server.coordinator import Coordinator
from ldpem.server.refusals import Conflict
from ldpem.server.store import Store
from tests.fedkit import ADMIN, run_request

RECORDS = 50
ROUNDS = 5


def report(i: int, total: list[float]) -> ReportIn:
    return ReportIn.model_validate(
        {
            "hospital": f"h{i}",
            "round": 0,
            "mechanism": "local",
            "count": expected_round_count(RECORDS, ROUNDS, 0),
            "total": total,
            "noise_std": 4.0,  # above the floor (the σ_r of the run's budget, 2.39)
        }
    )


def setup(tmp_path: Path) -> tuple[Coordinator, str, list[int]]:
    """A coordinator over a file store, one run of 3 hospitals, and a transaction counter."""
    store = Store(tmp_path / "state.sqlite")
    coordinator = Coordinator(store, admin_token=ADMIN, commit_window=0.01)
    request = RunCreate.model_validate(
        run_request(records=RECORDS, rounds=ROUNDS, d=2, beta0=[1.0, -1.0], forecast=False)
    )
    run_id = asyncio.run(coordinator.create_run(request)).run_id
    commits = [0]
    transaction = store.transaction

    @contextmanager
    def counted() -> Iterator[None]:
        with transaction():
            yield
        commits[0] += 1

    # A test double for this store's method (counts the commits).
    store.transaction = counted  # type: ignore[method-assign]
    return coordinator, run_id, commits


def submit_together(
    coordinator: Coordinator, run_id: str, reports: list[ReportIn]
) -> list[ReportAck | BaseException]:
    hospitals = {h.name: h for h in coordinator.store.hospitals(run_id)}

    async def scenario() -> list[Any]:
        return await asyncio.gather(
            *(coordinator.submit_report(run_id, 0, hospitals[r.hospital], r) for r in reports),
            return_exceptions=True,
        )

    return asyncio.run(scenario())


def test_concurrent_reports_share_one_commit_and_close_the_round(tmp_path: Path) -> None:
    coordinator, run_id, commits = setup(tmp_path)
    acks = submit_together(coordinator, run_id, [report(i, [0.1 * i, 0.0]) for i in range(3)])
    assert all(isinstance(a, ReportAck) and not a.duplicate for a in acks)
    assert commits[0] == 1
    assert coordinator.summary(run_id).round == 1
    # Acknowledged means committed: another connection to the file sees every report.
    other = Store(tmp_path / "state.sqlite")
    try:
        assert [r.hospital for r in other.reports(run_id, 0)] == ["h0", "h1", "h2"]
    finally:
        other.close()


def test_a_refused_report_in_a_batch_does_not_undo_the_others(tmp_path: Path) -> None:
    coordinator, run_id, commits = setup(tmp_path)
    first, conflicting, other = report(0, [0.1, 0.0]), report(0, [0.2, 0.0]), report(1, [0.0, 0.0])
    outcomes = submit_together(coordinator, run_id, [first, conflicting, other])
    assert isinstance(outcomes[0], ReportAck) and isinstance(outcomes[2], ReportAck)
    assert isinstance(outcomes[1], Conflict)  # HTTP 409
    assert commits[0] == 1
    stored = {r.hospital: r.total for r in coordinator.store.reports(run_id, 0)}
    assert stored == {"h0": [0.1, 0.0], "h1": [0.0, 0.0]}
    assert coordinator.summary(run_id).round == 0  # h2 has not reported


def test_a_retry_in_the_same_batch_is_a_duplicate(tmp_path: Path) -> None:
    coordinator, run_id, _ = setup(tmp_path)
    acks = submit_together(coordinator, run_id, [report(0, [0.1, 0.0]), report(0, [0.1, 0.0])])
    assert sorted(a.duplicate for a in acks if isinstance(a, ReportAck)) == [False, True]
    assert len(coordinator.store.reports(run_id, 0)) == 1


def test_a_failed_commit_acknowledges_nothing(tmp_path: Path) -> None:
    coordinator, run_id, _ = setup(tmp_path)
    store = coordinator.store

    @contextmanager
    def failing() -> Iterator[None]:
        with Store.transaction(store):
            yield
            raise OSError("disk full")

    # A test double for this store's method (fails the commit).
    store.transaction = failing  # type: ignore[method-assign]
    outcomes = submit_together(coordinator, run_id, [report(0, [0.1, 0.0]), report(1, [0.0, 0.0])])
    assert all(isinstance(o, OSError) for o in outcomes)
    assert store.reports(run_id, 0) == []


def test_the_commit_runs_off_the_event_loop_and_later_reports_form_the_next_batch(
    tmp_path: Path,
) -> None:
    """The batch's transaction (commit and fsync) runs in a worker thread, so the event loop
    keeps serving; a report arriving while a batch commits is committed in the next one."""
    coordinator, run_id, _ = setup(tmp_path)
    hospitals = {h.name: h for h in coordinator.store.hospitals(run_id)}
    threads: list[int] = []
    transaction = coordinator.store.transaction
    started = threading.Event()

    @contextmanager
    def slow() -> Iterator[None]:
        threads.append(threading.get_ident())
        with transaction():
            started.set()
            time.sleep(0.2)  # a slow fsync
            yield

    coordinator.store.transaction = slow  # type: ignore[method-assign]

    async def scenario() -> list[Any]:
        loop_thread = threading.get_ident()
        first = asyncio.create_task(
            coordinator.submit_report(run_id, 0, hospitals["h0"], report(0, [0.1, 0.0]))
        )
        ticks = 0
        late: asyncio.Task[ReportAck] | None = None
        while not started.is_set():
            await asyncio.sleep(0.001)
        # The loop runs while the first batch is committing: it is not blocked by it.
        while not first.done():
            ticks += 1
            if ticks == 5:
                late = asyncio.create_task(
                    coordinator.submit_report(run_id, 0, hospitals["h1"], report(1, [0.0, 0.0]))
                )
            await asyncio.sleep(0.01)
        assert late is not None
        return [await first, await asyncio.wait_for(late, 5), ticks, loop_thread]

    first, late, ticks, loop_thread = asyncio.run(scenario())
    assert isinstance(first, ReportAck) and isinstance(late, ReportAck)
    assert ticks >= 5
    assert threads and loop_thread not in threads
    assert len(threads) == 2  # the late report had a batch of its own
    assert [r.hospital for r in coordinator.store.reports(run_id, 0)] == ["h0", "h1"]
