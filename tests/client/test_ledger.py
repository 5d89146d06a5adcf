"""The ledger's reservation (the budget check and the charge in one transaction) and the
state directory's lock (docs/PRIVACY.md, threat 8)."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import multiprocessing
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from ldpem.client.ledger import LOCK_FILE, Binding, BudgetExceeded, Entry, Ledger
from ldpem.common.core.accounting import ratio_for_budget
from ldpem.common.core.errors import UserError

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
    assert (tmp_path / LOCK_FILE).read_text() == f"pid={os.getpid()}"
    with pytest.raises(UserError, match=rf"another agent \(pid {os.getpid()}\) is using"):
        Ledger(tmp_path, exclusive=True)
    reader = Ledger(tmp_path)  # readers do not take the lock
    reader.close()
    holder.close()
    Ledger(tmp_path, exclusive=True).close()


def test_a_round_of_noise_shares_keeps_its_fallback_epsilon(tmp_path: Path) -> None:
    """The fallback ε (this holder's share alone) is stored with the round, survives a
    reopen and the persist step, and is never charged: the spend is the round's μ."""
    ledger = Ledger(tmp_path)
    shared = dataclasses.replace(entry("shares"), fallback_epsilon=3.25)
    assert reserve(ledger, shared).fallback_epsilon == 3.25
    ledger.persist(shared, b"{}")
    assert reserve(ledger, entry("plain", t=1), budget=None).fallback_epsilon is None
    ledger.close()
    reopened = Ledger(tmp_path)
    assert reopened.entry("shares", 0) == dataclasses.replace(
        shared, body=b"{}", status="persisted"
    )
    assert reopened.entry("plain", 1) is not None
    assert reopened.entry("plain", 1).fallback_epsilon is None  # type: ignore[union-attr]
    # Charged: the two rounds' μ (two runs), nothing of the fallback.
    assert reopened.mu_squared("default") == pytest.approx(2 * MU_ONE**2)
    reopened.close()


#: The ledger's schema 2, as agents before the fallback column wrote it.
SCHEMA_2 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE bindings (run_key TEXT PRIMARY KEY, seed TEXT NOT NULL, records TEXT NOT NULL,
    dataset TEXT NOT NULL, binding TEXT NOT NULL);
CREATE TABLE rounds (run_key TEXT NOT NULL, round INTEGER NOT NULL, data TEXT NOT NULL,
    mu REAL NOT NULL, epsilon REAL NOT NULL, delta REAL NOT NULL, noise_std REAL NOT NULL,
    beta_digest TEXT NOT NULL, body BLOB NOT NULL, status TEXT NOT NULL,
    persisted_at REAL NOT NULL, acknowledged_at REAL, PRIMARY KEY (run_key, round));
INSERT INTO meta VALUES ('schema', '2');
INSERT INTO meta VALUES ('seed', '12345');
INSERT INTO bindings VALUES ('old', '7', 'digest', 'cohort', '{"d": 3}');
INSERT INTO rounds VALUES ('old', 0, 'cohort', 0.5, 1, 1e-5, 2, 'b', x'7b7d',
    'acknowledged', 1.0, 2.0);
"""


def test_a_schema_2_ledger_opened_by_this_agent_keeps_working(tmp_path: Path) -> None:
    """An agent upgraded over an old state directory: its spends, seed and bindings are
    read as they were (no fallback recorded for the old round), new rounds record theirs,
    and the file is migrated once (opening it again changes nothing)."""
    with contextlib.closing(sqlite3.connect(tmp_path / "ledger.sqlite")) as db:
        db.executescript(SCHEMA_2)
        db.commit()
    for opening in range(2):
        ledger = Ledger(tmp_path)
        old = ledger.entry("old", 0)
        assert old is not None
        assert (old.data, old.mu, old.body, old.status) == ("cohort", 0.5, b"{}", "acknowledged")
        assert old.fallback_epsilon is None
        assert ledger.seed() == 12345
        bound = ledger.binding("old")
        assert bound is not None and (bound.dataset, bound.binding) == ("cohort", '{"d": 3}')
        assert ledger.mu_squared("cohort") == pytest.approx(0.25 if opening == 0 else 0.26)
        new = dataclasses.replace(entry("new"), data="cohort", mu=0.1, fallback_epsilon=2.0)
        assert reserve(ledger, new, budget=None).fallback_epsilon == 2.0
        assert ledger.mu_squared("cohort") == pytest.approx(0.26)
        ledger.close()
    with contextlib.closing(sqlite3.connect(tmp_path / "ledger.sqlite")) as db:
        assert db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() == ("3",)
        columns = [row[1] for row in db.execute("PRAGMA table_info(rounds)")]
        assert columns.count("fallback_epsilon") == 1


def test_unbind_unused_removes_only_a_binding_nothing_was_charged_to(tmp_path: Path) -> None:
    """A refused first contact is unbound (issue 32); a run with a charged round never is:
    its binding is what keeps a restart from reporting a record twice."""
    ledger = Ledger(tmp_path)
    for run in ("refused", "charged"):
        ledger.bind_run(run, Binding(seed=1, records="digest", dataset="default", binding="{}"))
    reserve(ledger, entry("charged"))
    assert ledger.unbind_unused("refused") is True
    assert ledger.binding("refused") is None
    assert ledger.unbind_unused("charged") is False
    assert ledger.binding("charged") is not None
    assert ledger.unbind_unused("never-bound") is False
    ledger.close()
