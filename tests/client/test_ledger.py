"""The ledger's reservation (the budget check and the charge in one transaction) and the
state directory's lock (docs/PRIVACY.md, threat 8)."""

from __future__ import annotations

import math
import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest

from ldpem.client.ledger import LOCK_FILE, BudgetExceeded, Entry, Ledger
from ldpem.common.accounting import ratio_for_budget
from ldpem.common.errors import UserError

#: μ of one run that spends exactly ε = 1 at δ = 1e-5 (exact accounting).
MU_ONE = ratio_for_budget(1.0, 1e-5, "exact")


def entry(run: str, t: int = 0, mu: float = MU_ONE, beta: str = "b") -> Entry:
    return Entry(
        run_key=run,
        round=t,
        data="default",
        mu=mu,
        epsilon=1.0,
        delta=1e-5,
        noise_std=1.0,
        beta_digest=beta,
        body=b"",
        status="reserved",
    )


def reserve(ledger: Ledger, item: Entry, budget: float | None = 1.0) -> Entry:
    return ledger.reserve(item, budget=budget, delta=1e-5, accounting="exact")


def test_a_reservation_counts_as_spent_and_a_second_run_over_the_budget_is_refused(
    tmp_path: Path,
) -> None:
    ledger = Ledger(tmp_path)
    first = reserve(ledger, entry("r1"))
    assert first.status == "reserved" and first.body == b""
    assert ledger.spent_epsilon(delta=1e-5, accounting="exact") == pytest.approx(1.0, rel=1e-9)
    with pytest.raises(BudgetExceeded) as over:
        reserve(ledger, entry("r2"))
    assert over.value.spent > 1.0
    assert ledger.entry("r2", 0) is None  # the refused reservation left nothing behind
    # Another round of the same run: a record takes part in one round, μ does not add.
    assert reserve(ledger, entry("r1", t=1)).status == "reserved"
    ledger.close()


def test_a_round_already_reserved_returns_the_stored_entry(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    reserve(ledger, entry("r1", beta="first"))
    again = reserve(ledger, entry("r1", beta="second"))
    assert again.beta_digest == "first" and again.status == "reserved"
    ledger.close()


def test_persist_stores_the_bytes_of_a_reserved_round_once(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    reserved = reserve(ledger, entry("r1"))
    stored = ledger.persist(reserved, b"report")
    assert stored.status == "persisted" and stored.body == b"report"
    assert ledger.entry("r1", 0) == stored
    with pytest.raises(RuntimeError, match="not reserved"):
        ledger.persist(reserved, b"another report")
    assert ledger.entry("r1", 0) == stored
    ledger.close()


def test_no_check_for_reports_that_are_not_private(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    reserve(ledger, entry("r1"))
    assert reserve(ledger, entry("r2", mu=math.inf), budget=None).mu == math.inf
    ledger.close()


def _reserve_in_child(directory: str, run: str, start: Any, results: Any) -> None:
    ledger = Ledger(directory)  # a writer that ignores the lock
    start.wait(30)
    try:
        reserve(ledger, entry(run))
        results.put("reserved")
    except BudgetExceeded:
        results.put("refused")
    finally:
        ledger.close()


def test_two_writers_released_together_cannot_both_pass_the_check(tmp_path: Path) -> None:
    """Even without the lock, the check and the charge are one transaction: of two
    processes reserving a full-budget run each at the same moment, exactly one succeeds."""
    Ledger(tmp_path).close()  # the schema exists before the race
    context = multiprocessing.get_context("spawn")
    start, results = context.Event(), context.Queue()
    children = [
        context.Process(target=_reserve_in_child, args=(str(tmp_path), run, start, results))
        for run in ("a", "b")
    ]
    for child in children:
        child.start()
    start.set()
    outcomes = sorted(results.get(timeout=60) for _ in children)
    for child in children:
        child.join(30)
    assert outcomes == ["refused", "reserved"]


def test_the_lock_names_its_holder_and_is_released_on_close(tmp_path: Path) -> None:
    holder = Ledger(tmp_path, exclusive=True)
    assert (tmp_path / LOCK_FILE).read_text() == str(os.getpid())
    with pytest.raises(UserError, match=rf"another agent \(pid {os.getpid()}\) is using"):
        Ledger(tmp_path, exclusive=True)
    reader = Ledger(tmp_path)  # readers do not take the lock
    reader.close()
    holder.close()
    Ledger(tmp_path, exclusive=True).close()
